// PeerService: kolo.v1.Peer — member daemons of multi-node jobs negotiate
// with the coordinators this daemon runs (for the jobs whose rank 0 it
// hosts). CoordinatorRegistry keeps those coordinators and a thread that
// heartbeats their members and ends jobs whose members fell silent.
//
// Untrusted traffic, before a stream has shown the job token, is bounded
// (PeerServiceLimits): how many streams one peer address and all peers may
// hold (more are answered RESOURCE_EXHAUSTED), how long the first message
// may take to arrive (the stream is cancelled after it) and how large it may
// be. Once a member joined, the coordinator's messages to it go through a
// bounded queue with its own writer thread: a member that stops reading is
// cut off with RESOURCE_EXHAUSTED and its job aborted, while the
// coordinator's other members and jobs carry on.
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
#include "proto/kolo/v1/peer.grpc.pb.h"

namespace kolo::daemon {

// Bounds on what a peer may make this daemon hold.
struct PeerServiceLimits {
  // The first message of a stream (Hello, with the job token) must arrive
  // within this.
  absl::Duration auth_deadline = absl::Seconds(5);
  // The largest first message (a Hello is small; the server's gRPC limit,
  // kMaxMemberMessageBytes, is for the Ready reports of a joined member).
  size_t max_hello_bytes = 64 << 10;
  // Streams at once, from one peer address and from all.
  int max_streams_per_peer = 64;
  int max_streams = 1024;
  // Messages queued to one member before it counts as no longer reading.
  size_t max_queued_messages = 4096;
  // How long a member that came before the job's rank 0 waits for it.
  absl::Duration job_start_wait = absl::Minutes(5);
};

// The largest message the Peer server accepts (a member's Ready report).
inline constexpr int kMaxMemberMessageBytes = 64 << 20;

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
  // UNAVAILABLE when there is none by then or the registry stops.
  absl::StatusOr<std::shared_ptr<Coordinator>> WaitFor(const std::string& job_id,
                                                       const std::string& token,
                                                       absl::Duration timeout,
                                                       const std::function<bool()>& keepalive);
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

class PeerService final : public kolo::v1::Peer::Service {
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
  // (elastic_leader.h); answers within about half a second.
  grpc::Status Rendezvous(grpc::ServerContext* context, const kolo::v1::ElasticReport* report,
                          kolo::v1::ElasticFormed* formed) override;

  // Streams open now (for tests and status).
  int streams() const;

 private:
  class StreamSlot;
  // Reads and checks the first message (Hello) within the auth deadline.
  grpc::Status ReadHello(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<kolo::v1::CoordinatorMessage, kolo::v1::MemberMessage>* stream,
      kolo::v1::Hello* hello);

  CoordinatorRegistry* const registry_;
  ElasticLeaders* const elastic_leaders_;
  const PeerServiceLimits limits_;
  std::unique_ptr<CallDeadlines> auth_watch_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> streams_by_peer_ ABSL_GUARDED_BY(mu_);
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kolo::daemon
