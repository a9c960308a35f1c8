#include "common/call_deadlines.h"

#include <grpcpp/server_context.h>

#include <algorithm>
#include <utility>

#include "common/start_thread.h"

namespace kolo {

CallDeadlines::~CallDeadlines() {
  std::thread thread;
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    thread = std::move(thread_);
  }
  if (thread.joinable()) thread.join();
}

absl::StatusOr<uint64_t> CallDeadlines::Arm(grpc::ServerContext* context, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  if (!thread_.joinable()) {
    // (The thread waits for mu_ before it looks at anything.)
    absl::StatusOr<std::thread> t =
        StartThread("the call-deadline watcher", "kolo-deadlines", [this] { Loop(); });
    if (!t.ok()) return t.status();
    thread_ = std::move(*t);
  }
  const uint64_t id = next_id_++;
  watched_[id] = Watched{context, deadline, false};
  ++changes_;
  return id;
}

bool CallDeadlines::Disarm(uint64_t id) {
  absl::MutexLock l(&mu_);
  auto it = watched_.find(id);
  const bool fired = it != watched_.end() && it->second.fired;
  if (it != watched_.end()) watched_.erase(it);
  return fired;
}

void CallDeadlines::Loop() {
  absl::MutexLock l(&mu_);
  while (!stop_) {
    absl::Time next = absl::InfiniteFuture();
    const absl::Time now = absl::Now();
    for (auto& [id, w] : watched_) {
      if (w.fired) continue;
      if (w.deadline <= now) {
        // Under mu_: the call cannot end (Disarm takes mu_) while it is
        // cancelled.
        w.fired = true;
        w.context->TryCancel();
      } else {
        next = std::min(next, w.deadline);
      }
    }
    const uint64_t seen = changes_;
    auto wake = [this, seen]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_ || changes_ != seen; };
    mu_.AwaitWithDeadline(absl::Condition(&wake), next);
  }
}

}  // namespace kolo
