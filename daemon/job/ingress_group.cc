#include "daemon/job/ingress_group.h"

#include <algorithm>

#include "common/futex.h"

namespace kolo::daemon {

void IngressGroup::Add(IngressMember* member) {
  absl::MutexLock l(&poll_mu_);
  members_.push_back(member);
}

void IngressGroup::Remove(const IngressMember* member) {
  absl::MutexLock l(&poll_mu_);
  members_.erase(std::remove_if(members_.begin(), members_.end(),
                                [&](const IngressMember* m) { return m == member; }),
                 members_.end());
}

bool IngressGroup::TryLead() {
  uint32_t none = 0;
  return leader_.compare_exchange_strong(none, 1, std::memory_order_acq_rel);
}

void IngressGroup::Resign() {
  leader_.store(0, std::memory_order_release);
  Wake();
}

void IngressGroup::Wake() {
  seq_.fetch_add(1, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_relaxed) != 0) FutexWakeAll(&seq_);
}

void IngressGroup::WaitWhileLed(absl::Duration timeout) {
  const uint32_t seq = seq_.load(std::memory_order_acquire);
  waiters_.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (led()) FutexWait(&seq_, seq, timeout);
  waiters_.fetch_sub(1, std::memory_order_relaxed);
}

int IngressGroup::PollAll(int looks) {
  absl::MutexLock l(&poll_mu_);
  // A member is polled only when it has something pending: an empty ring
  // costs one look, not a read.
  int read = 0;
  for (int i = 0; i <= looks; ++i) {
    for (IngressMember* member : members_) {
      if (member->HasPending()) read += member->Poll();
    }
    if (read > 0) break;
    if (i < looks) __builtin_ia32_pause();
  }
  return read;
}

}  // namespace kolo::daemon
