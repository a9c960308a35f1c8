// PeerService: kolo.v1.Peer — member daemons of multi-node jobs negotiate
// with the coordinators this daemon runs (for the jobs whose rank 0 it
// hosts). CoordinatorRegistry keeps those coordinators and a thread that
// heartbeats their members and ends jobs whose members fell silent.
//
// Untrusted traffic, before a stream has shown the job token, is bounded
// (PeerServiceLimits): how many streams one peer address and all peers may
// hold (more are answered RESOURCE_EXHAUSTED); no message of a stream is
// read before the job id and token in its metadata found the job (so what
// a peer without the token can make this daemon buffer is its metadata and
// one flow-control window per stream); how many Hellos for jobs not started
// here one peer identity may have held, and for how long; how many failed
// authentications a peer may have before it is refused at once for a while
// (failure_budget.h); and how long the Hello may take once read. Once a
// member joined, the coordinator's messages to it go through a queue
// bounded in messages and bytes with its own writer thread: a member that
// stops reading is cut off with RESOURCE_EXHAUSTED and its job aborted,
// while the coordinator's other members and jobs carry on.
//
// Thread-safety: thread-safe.
#pragma once

#include <functional>
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
#include "common/call_deadlines.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/elastic/elastic_leader.h"
#include "daemon/wire/failure_budget.h"
#include "daemon/wire/peer_protocol.h"
#include "proto/kolo/v1/peer.grpc.pb.h"

namespace grpc {
class ServerBuilder;
}

namespace kolo::daemon {

// Bounds on what a peer may make this daemon hold.
struct PeerServiceLimits {
  // The first message of a stream (Hello) must arrive within this of its
  // job being found.
  absl::Duration auth_deadline = absl::Seconds(5);
  // The largest first message (a Hello is small). Every message the server
  // takes is at most kMaxMemberMessageBytes (gRPC 1.51 applies that bound
  // only once it holds the whole message: what keeps a peer without the
  // token from making this daemon buffer a message is that none of its
  // messages is read).
  size_t max_hello_bytes = 64 << 10;
  // Streams at once, from one peer address, over one connection and from
  // all.
  int max_streams_per_peer = 64;
  int max_streams_per_connection = 100;
  int max_streams = 1024;
  // What may wait for one member's writer before it counts as no longer
  // reading: messages and bytes (two of the largest plans).
  size_t max_queued_messages = 4096;
  size_t max_queued_bytes = size_t{2} * kMaxPeerMessageBytes;
  // A Hello for a job that has not started here (a member that came before
  // the job's rank 0 attached) is held this long, then answered NOT_FOUND
  // ("not started here yet"; the member says Hello again, see member_link.h),
  // and one peer identity may have this many held at once (more are
  // answered RESOURCE_EXHAUSTED, and may retry too).
  absl::Duration unknown_job_wait = absl::Seconds(10);
  int max_unknown_job_streams_per_peer = 8;
  // Failed authentications a peer identity may have (failure_budget.h).
  FailureBudgetLimits failures;
};

// Sets the Peer server's bounds on `builder`: the largest message it
// receives (kMaxMemberMessageBytes), small HTTP/2 flow-control windows (no
// BDP probe), streams per connection, a thread cap above the stream caps,
// the TLS handshake deadline and keepalive enforcement.
void ConfigurePeerServer(const PeerServiceLimits& limits, grpc::ServerBuilder* builder);

class CoordinatorRegistry {
 public:
  // Starts the registry's thread (heartbeats and silence checks of every
  // coordinator).
  static absl::StatusOr<std::unique_ptr<CoordinatorRegistry>> Start(CoordinatorOptions options,
                                                                    absl::Duration heartbeat,
                                                                    absl::Duration peer_timeout);
  ~CoordinatorRegistry();

  // The coordinator of `job_id` and `token`, created on first use with
  // `size`. Only this daemon's own job (the one hosting rank 0) creates it,
  // so the token is the one its ranks attached with, never one a remote
  // node chose. Coordinators are keyed by job id and token: a job id used
  // with another token (a squatter, or a stale job) never shares or
  // disturbs this one.
  // A coordinator it makes plans with the job's `settings` in force on this
  // node (the registry's own options where none are given), and admits
  // only nodes whose ranks asked for `asked`.
  std::shared_ptr<Coordinator> GetOrCreate(const std::string& job_id, const std::string& token,
                                           int size, const kolo::v1::JobSettings& asked = {},
                                           const std::optional<plan::JobSettings>& settings = {});
  // The live coordinator of `job_id` whose token is `token` (compared in
  // constant time) once this daemon's job has made it, waiting up to
  // `timeout` (other nodes may start before rank 0's). PERMISSION_DENIED at
  // once when the job runs here under another token. While waiting,
  // `keepalive` runs every heartbeat; its false ends the wait (CANCELLED).
  // NOT_FOUND when there is none by then; UNAVAILABLE when the registry
  // stops.
  absl::StatusOr<std::shared_ptr<Coordinator>> WaitFor(const std::string& job_id,
                                                       const std::string& token,
                                                       absl::Duration timeout,
                                                       const std::function<bool()>& keepalive);
  // Whether a live job `job_id` runs here (under any token).
  bool Started(const std::string& job_id) const;
  // The live coordinator of `job_id` whose token is `token`, or null; does
  // not wait.
  std::shared_ptr<Coordinator> Find(const std::string& job_id, const std::string& token) const;
  int size() const;
  // Blocks until at least `n` WaitFor calls are waiting (nodes that came
  // before rank 0's), or `timeout` passed; returns whether they are.
  bool AwaitWaiters(int n, absl::Duration timeout) const;

 private:
  CoordinatorRegistry(CoordinatorOptions options, absl::Duration heartbeat,
                      absl::Duration peer_timeout);
  void Loop();

  const CoordinatorOptions options_;
  const absl::Duration heartbeat_;
  const absl::Duration peer_timeout_;
  mutable absl::Mutex mu_;
  bool StartedLocked(const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live one of `job_id` and `token`, or null.
  std::shared_ptr<Coordinator> FindLocked(const std::string& job_id, const std::string& token) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // By job id; one per token (almost always exactly one).
  absl::flat_hash_map<std::string, std::vector<std::shared_ptr<Coordinator>>> coordinators_
      ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;  // WaitFor calls waiting
  std::thread thread_;
};

// The job a Negotiate stream is for, from its metadata.
struct StreamJob {
  std::string id;
  std::string token;
};

class PeerService final
    : public kolo::v1::Peer::WithStreamedUnaryMethod_Rendezvous<kolo::v1::Peer::Service> {
 public:
  // `registry` and `elastic_leaders` (null: Rendezvous is refused) must
  // outlive the service.
  explicit PeerService(CoordinatorRegistry* registry, PeerServiceLimits limits = {},
                       ElasticLeaders* elastic_leaders = nullptr);
  ~PeerService() override;

  grpc::Status Negotiate(grpc::ServerContext* context,
                         grpc::ServerReaderWriter<kolo::v1::CoordinatorMessage,
                                                  kolo::v1::MemberMessage>* stream) override;

  // An elastic job's node reports its waiting ranks to the membership leader
  // (elastic_leader.h); answers within about half a second. A unary call,
  // served as a stream so that nothing of it is read before its metadata
  // (kJobIdKey, kJobTokenKey) names a job this daemon knows: a peer's
  // spent failure budget, a call without them and one for a job unknown
  // here (NOT_FOUND; the node asks again) cost only the call's headers.
  grpc::Status StreamedRendezvous(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<kolo::v1::ElasticReport, kolo::v1::ElasticFormed>* stream) override;

  // Streams open now, and those held for jobs not started yet (for tests
  // and status).
  int streams() const;
  int unknown_job_streams() const;

 private:
  class StreamSlot;
  class UnknownJobSlot;
  // Reads and checks the first message (Hello, for `job`) within the auth
  // deadline.
  grpc::Status ReadHello(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<kolo::v1::CoordinatorMessage, kolo::v1::MemberMessage>* stream,
      const StreamJob& job, kolo::v1::Hello* hello);
  // Step 3 of Negotiate: the coordinator of `job`.
  grpc::Status FindCoordinator(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<kolo::v1::CoordinatorMessage, kolo::v1::MemberMessage>* stream,
      const std::string& identity, const StreamJob& job, std::shared_ptr<Coordinator>* coordinator);
  // Logs a stream of `identity` that failed authentication and counts it
  // against its budget.
  void CountFailure(const std::string& identity, const std::string& why);

  CoordinatorRegistry* const registry_;
  ElasticLeaders* const elastic_leaders_;
  const PeerServiceLimits limits_;
  std::unique_ptr<CallDeadlines> auth_watch_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> streams_by_peer_ ABSL_GUARDED_BY(mu_);
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
  // Streams held for jobs not started yet, by peer identity.
  absl::flat_hash_map<std::string, int> unknown_by_peer_ ABSL_GUARDED_BY(mu_);
  int unknown_streams_ ABSL_GUARDED_BY(mu_) = 0;
  FailureBudget failures_;
};

}  // namespace kolo::daemon
