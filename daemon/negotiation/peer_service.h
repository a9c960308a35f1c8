// PeerService: kolo.v1.Peer — member daemons of multi-node jobs negotiate
// with the coordinators this daemon runs (for the jobs whose rank 0 it
// hosts). CoordinatorRegistry keeps those coordinators and a thread that
// heartbeats their members and ends jobs whose members fell silent.
//
// Thread-safety: thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/negotiation/coordinator.h"
#include "proto/kolo/v1/peer.grpc.pb.h"

namespace kolo::daemon {

class CoordinatorRegistry {
 public:
  CoordinatorRegistry(CoordinatorOptions options, absl::Duration heartbeat,
                      absl::Duration peer_timeout);
  ~CoordinatorRegistry();

  // The coordinator of `job_id`, created on first use with `token` and
  // `size` (a later wrong token is refused by Coordinator::AddMember). Only
  // this daemon's own job (the one hosting rank 0) creates it, so the token
  // is the one its ranks attached with, never one a remote node chose.
  std::shared_ptr<Coordinator> GetOrCreate(const std::string& job_id, const std::string& token,
                                           int size);
  // The live coordinator of `job_id` once this daemon's job has made it,
  // waiting up to `timeout` (other nodes may start before rank 0's). While
  // waiting, `keepalive` runs every heartbeat; its false ends the wait
  // (CANCELLED). UNAVAILABLE when there is none by then or the registry
  // stops.
  absl::StatusOr<std::shared_ptr<Coordinator>> WaitFor(const std::string& job_id,
                                                       absl::Duration timeout,
                                                       const std::function<bool()>& keepalive);
  int size() const;
  // Blocks until at least `n` WaitFor calls are waiting (nodes that came
  // before rank 0's), or `timeout` passed; returns whether they are.
  bool AwaitWaiters(int n, absl::Duration timeout) const;

 private:
  void Loop();

  const CoordinatorOptions options_;
  const absl::Duration heartbeat_;
  const absl::Duration peer_timeout_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Coordinator>> coordinators_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;  // WaitFor calls waiting
  std::thread thread_;
};

class PeerService final : public kolo::v1::Peer::Service {
 public:
  // `registry` must outlive the service.
  explicit PeerService(CoordinatorRegistry* registry) : registry_(registry) {}

  grpc::Status Negotiate(grpc::ServerContext* context,
                         grpc::ServerReaderWriter<kolo::v1::CoordinatorMessage,
                                                  kolo::v1::MemberMessage>* stream) override;

 private:
  CoordinatorRegistry* const registry_;
};

}  // namespace kolo::daemon
