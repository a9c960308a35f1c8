// CallDeadlines: cancels a gRPC server call whose client has not sent its
// first message in time, so an idle stream holds a server thread for a
// bounded time only. One thread serves every armed call (the Node service's
// Attach and the Peer service's Negotiate use it), started with the first
// one: a service never called starts none, and a thread the system refuses
// fails that call, not the daemon.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace grpc {
class ServerContext;
}

namespace kolo {

class CallDeadlines {
 public:
  CallDeadlines() = default;
  ~CallDeadlines();
  CallDeadlines(const CallDeadlines&) = delete;
  CallDeadlines& operator=(const CallDeadlines&) = delete;

  // Cancels `context` at `deadline` unless disarmed first; `context` must
  // stay valid until Disarm. RESOURCE_EXHAUSTED when the watching thread
  // cannot be started (then nothing is armed).
  absl::StatusOr<uint64_t> Arm(grpc::ServerContext* context, absl::Time deadline);
  // Stops watching `id`; returns whether its deadline had passed (then its
  // call was cancelled).
  bool Disarm(uint64_t id);

 private:
  struct Watched {
    grpc::ServerContext* context;
    absl::Time deadline;
    bool fired;
  };
  void Loop();

  absl::Mutex mu_;
  std::map<uint64_t, Watched> watched_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_ ABSL_GUARDED_BY(mu_);  // started by the first Arm
};

}  // namespace kolo
