#include "daemon/session/attach_deadline.h"

#include <grpcpp/server_context.h>

#include <vector>

namespace kolo::daemon {

AttachDeadlines::AttachDeadlines() : thread_([this] { Loop(); }) {}

AttachDeadlines::~AttachDeadlines() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

AttachDeadlines::Armed AttachDeadlines::Arm(grpc::ServerContext* context, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  const uint64_t id = next_id_++;
  armed_[id] = Watch{deadline, context};
  return Armed(this, id);
}

void AttachDeadlines::Armed::Disarm() {
  if (owner_ == nullptr) return;
  absl::MutexLock l(&owner_->mu_);
  owner_->armed_.erase(id_);
  owner_ = nullptr;
}

void AttachDeadlines::Loop() {
  absl::MutexLock l(&mu_);
  while (!stop_) {
    const absl::Time now = absl::Now();
    absl::Time next = now + absl::Milliseconds(200);
    for (auto it = armed_.begin(); it != armed_.end();) {
      if (it->second.deadline <= now) {
        // Under mu_: the call cannot finish (its guard disarms under mu_)
        // while it is cancelled.
        it->second.context->TryCancel();
        it = armed_.erase(it);
      } else {
        next = std::min(next, it->second.deadline);
        ++it;
      }
    }
    mu_.AwaitWithDeadline(absl::Condition(&stop_), next);
  }
}

}  // namespace kolo::daemon
