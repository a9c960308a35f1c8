// MemberLink: a daemon's side of one multi-node job's negotiation with the
// job's coordinator (protocol in proto/kolo/v1/peer.proto). It says Hello,
// reports locally ready tensors (as cache bits once the coordinator has
// assigned ids), hands Welcome, plans and aborts to its listener (the job),
// and heartbeats both ways: silence from the coordinator past the peer
// timeout aborts the job.
//
// The coordinator is reached through a PeerChannel: a gRPC stream to the
// daemon hosting rank 0, or a direct link when that is this daemon.
//
// Once the job's transport connects, the steady state can leave the Peer
// plane for the transport's message lane (UseLane): Ready reports go to the
// coordinator's node as lane messages, sent by the thread that calls Flush
// (the job's, after each batch of submissions) instead of being handed to
// the writer thread and a gRPC stream, and plans may come back the same way.
// A direct link (the coordinator in this daemon) takes the reports on the
// thread that calls Flush too. Plans are numbered, and run in their order
// whichever way each came. Ready reports need no order among themselves: a
// name is reported again only after the plan that ran it arrived, so no two
// reports on their way concern the same name. The Hello, the Welcome,
// heartbeats, aborts and anything too large for the lane stay on the Peer
// plane, whose heartbeats keep watching the coordinator.
//
// Thread-safety: thread-safe. Outgoing messages go through a queue drained by
// the link's own thread (or, on the lane, a non-blocking send), so callers
// never block on the network; Flush to a direct link runs the in-process
// coordinator's planning on the caller's thread. The listener is called from
// the link's threads and the lane's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/backend/device_comm_plan.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/transport/transport.h"
#include "daemon/wire/peer_protocol.h"
#include "proto/kolo/v1/peer.pb.h"

namespace grpc {
class ChannelCredentials;
}

namespace kolo::daemon {

// One planned response, with its tensors resolved to names.
struct PlannedEntry {
  // PeerKey(process set, name) of each member.
  std::vector<std::string> names;
  int process_set = 0;
  int new_process_set = 0;  // an add_process_set: the set's id
  int last_joined = -1;     // the join of every rank: the last to join
  // Nodes whose ranks all joined (they take part with zeros, laid out from
  // `metas`).
  std::vector<int> joined_nodes;
  std::vector<kolo::v1::TensorMeta> metas;
  absl::Status error;  // OK, or the disagreement to deliver
  // The job's device communicator, to join before running this response
  // (validated against the job's size).
  std::optional<DeviceCommPlan> device_comm;
  // Allgather: every rank's first dimension, by global rank.
  std::vector<int64_t> rows;
  // Alltoall: size x size rows rank i sends to rank j, row by row.
  std::vector<int64_t> splits;
};

class LinkListener {
 public:
  virtual ~LinkListener() = default;
  virtual void OnWelcome(const kolo::v1::Welcome& welcome) = 0;
  virtual void OnPlan(std::vector<PlannedEntry> plan) = 0;
  // The job is over: `why` names who or what ended it (see abort_status.h
  // for whether planned responses may still finish).
  virtual void OnLinkAbort(const absl::Status& why) = 0;
};

// The member's end of the negotiation stream.
class PeerChannel {
 public:
  virtual ~PeerChannel() = default;
  virtual absl::Status Send(const kolo::v1::MemberMessage& message) = 0;
  // Blocks for the next message; false when the stream ended (`why` says how).
  virtual bool Receive(kolo::v1::CoordinatorMessage* message, std::string* why) = 0;
  // Ends the stream; a blocked Receive returns false.
  virtual void Close() = 0;
  // Whether Send returns at once (a coordinator in this process): then the
  // link sends reports on the thread that calls Flush, as over a lane.
  virtual bool immediate() const { return false; }
};

// How long a member keeps saying Hello to a coordinator's daemon that
// answers the job has not started there yet (its rank 0 has not attached),
// or that this node's share of its streams is taken for now.
inline constexpr absl::Duration kDefaultJoinWait = absl::Minutes(5);

// A gRPC stream to a remote coordinator at `address` (host:port), over
// `credentials` (mutual TLS or plaintext, see peer_tls.h). Until the
// Welcome, a refusal the coordinator's daemon marks for retry (a job not
// started there yet, a share taken; see PeerService) reopens the stream
// after a backoff and says the same Hello again, with the messages sent
// since (the refused stream read none of them), for up to `join_wait`;
// meanwhile Receive yields a heartbeat per attempt, so the link counts the
// coordinator as alive.
absl::StatusOr<std::unique_ptr<PeerChannel>> ConnectPeer(
    const std::string& address, absl::Duration timeout,
    std::shared_ptr<grpc::ChannelCredentials> credentials,
    absl::Duration join_wait = kDefaultJoinWait);

// `ready` as messages under kMaxMemberMessageBytes (what the Peer server
// takes): the cached bits and the device layout go in the first, tensors in
// their order, joins (which the coordinator counts after a report's other
// names) in the last. A tensor too large alone still goes alone.
std::vector<kolo::v1::MemberMessage> SplitReady(kolo::v1::Ready ready,
                                                size_t max_bytes = kMaxMemberMessageBytes);
// A direct link to a coordinator in this process.
std::unique_ptr<PeerChannel> LocalPeer(std::shared_ptr<Coordinator> coordinator);

struct MemberLinkOptions {
  kolo::v1::Hello hello;
  absl::Duration heartbeat = absl::Seconds(1);
  absl::Duration peer_timeout = absl::Seconds(10);
  std::string coordinator_name;  // for messages
};

class MemberLink {
 public:
  // Sends Hello on `channel` and starts the link's threads. `listener` must
  // outlive the link.
  static absl::StatusOr<std::unique_ptr<MemberLink>> Start(std::unique_ptr<PeerChannel> channel,
                                                           MemberLinkOptions options,
                                                           LinkListener* listener);
  ~MemberLink();

  // Reports a locally ready tensor. For a device tensor, `devices` is where
  // this node's ranks keep theirs; it goes along with the report.
  void ReportReady(const kolo::v1::TensorMeta& meta,
                   const kolo::v1::DeviceLayout* devices = nullptr);
  // Tells the coordinator the job is over (it relays to every node).
  void Abort(const absl::Status& why);
  // From now on Ready reports go over `lane` to node `coordinator_node` (the
  // coordinator's), sent by Flush; `lane` must outlive the link.
  void UseLane(MessageLane* lane, int coordinator_node);
  // Sends the reports gathered since the last one over the lane (or to a
  // coordinator in this process), on this thread. Otherwise the writer
  // thread sends them (as it does, within a heartbeat, for reports no Flush
  // followed).
  void Flush();
  // A message from the coordinator's node over the lane: a plan.
  void OnLaneMessage(absl::string_view message);
  // The cache id the coordinator gave `meta`'s name, if it did; `same` says
  // whether `meta` is what the id stands for (else the name changed).
  std::optional<uint32_t> CacheIdOf(const kolo::v1::TensorMeta& meta, bool* same);
  // Names whose metadata the link keeps for the response cache (reported and
  // not yet planned, or given a cache id).
  size_t remembered_names();

 private:
  MemberLink(std::unique_ptr<PeerChannel> channel, MemberLinkOptions options,
             LinkListener* listener);
  void ReadLoop();
  void WriteLoop();
  void Enqueue(kolo::v1::MemberMessage message);
  // Takes the gathered Ready report, if any, as messages (SplitReady).
  std::vector<kolo::v1::MemberMessage> TakeReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `message` over the lane; false if it has none or cannot take it.
  bool SendOnLane(const kolo::v1::MemberMessage& message);
  // Whether Flush sends the reports (not the writer).
  bool FlushSendsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return lane_ != nullptr || channel_->immediate();
  }
  // Runs plans in sequence, from either way: holds one that came early.
  void HandlePlan(const kolo::v1::Plan& plan);
  // Turns the next plan into entries for the listener.
  void DeliverPlan(const kolo::v1::Plan& plan);
  // The coordinator's abort, once every plan it sent before it arrived or
  // the wait for them is over (`now` past its deadline); ends the link.
  std::optional<absl::Status> TakeDueAbortLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<PeerChannel> channel_;
  const MemberLinkOptions options_;
  LinkListener* const listener_;

  absl::Mutex mu_;
  std::vector<kolo::v1::MemberMessage> outbox_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // the writer is sending a batch
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_heard_ ABSL_GUARDED_BY(mu_);
  // Cache ids the coordinator assigned, with the metadata they stand for.
  absl::flat_hash_map<std::string, std::pair<uint32_t, kolo::v1::TensorMeta>> cache_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::string> cache_names_ ABSL_GUARDED_BY(mu_);
  uint64_t plans_ ABSL_GUARDED_BY(mu_) = 0;  // received so far
  // Ready reports not yet sent: tensors and cache bits.
  kolo::v1::Ready ready_ ABSL_GUARDED_BY(mu_);
  bool ready_dirty_ ABSL_GUARDED_BY(mu_) = false;

  MessageLane* lane_ ABSL_GUARDED_BY(mu_) = nullptr;
  int lane_node_ ABSL_GUARDED_BY(mu_) = -1;
  // An abort from the coordinator that overtook plans sent over the lane.
  std::optional<absl::Status> held_abort_ ABSL_GUARDED_BY(mu_);
  uint64_t held_abort_plans_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time held_abort_deadline_ ABSL_GUARDED_BY(mu_);

  // Plans are handed on one at a time, in sequence; taken before mu_.
  absl::Mutex plan_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // Plans that came (over the lane or the stream) before an earlier one.
  std::map<uint64_t, kolo::v1::Plan> early_plans_ ABSL_GUARDED_BY(plan_mu_);

  std::thread reader_;
  std::thread writer_;
};

}  // namespace kolo::daemon
