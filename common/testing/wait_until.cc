#include "common/testing/wait_until.h"

#include "absl/time/clock.h"

namespace kolo {

bool WaitUntil(const std::function<bool()>& cond, absl::Duration timeout,
               absl::Duration poll) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!cond()) {
    if (absl::Now() >= deadline) return cond();
    absl::SleepFor(poll);
  }
  return true;
}

bool StaysFalse(const std::function<bool()>& cond, absl::Duration duration,
                absl::Duration poll) {
  const absl::Time end = absl::Now() + duration;
  while (!cond()) {
    if (absl::Now() >= end) return true;
    absl::SleepFor(poll);
  }
  return false;
}

}  // namespace kolo
