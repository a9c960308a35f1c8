#include "daemon/status/stall_inspector.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/start_thread.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {

StallInspector::StallInspector(JobRegistry* registry, Metrics* metrics, StallPolicy policy)
    : registry_(registry), metrics_(metrics), policy_(policy) {}

absl::StatusOr<std::unique_ptr<StallInspector>> StallInspector::Start(JobRegistry* registry,
                                                                      Metrics* metrics,
                                                                      StallPolicy policy) {
  std::unique_ptr<StallInspector> inspector(new StallInspector(registry, metrics, policy));
  absl::StatusOr<std::thread> thread =
      StartThread("the stall inspector", "kolo-stalls", [p = inspector.get()] { p->Loop(); });
  if (!thread.ok()) return thread.status();
  inspector->thread_ = std::move(*thread);
  return inspector;
}

StallInspector::~StallInspector() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void StallInspector::Loop() {
  // Often enough that a report or an abort comes within a quarter of its
  // threshold.
  const absl::Duration period =
      std::clamp(Threshold() / 4, absl::Milliseconds(50), absl::Seconds(1));
  absl::MutexLock l(&mu_);
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), period);
    if (stop_) return;
    mu_.Unlock();
    InspectOnce(absl::Now());
    mu_.Lock();
  }
}

absl::Duration StallInspector::Threshold() const {
  if (policy_.timeout > absl::ZeroDuration()) return std::min(policy_.warning, policy_.timeout);
  return policy_.warning;
}

void StallInspector::InspectOnce(absl::Time now) {
  absl::flat_hash_set<std::string> seen;
  for (const auto& job : registry_->Jobs()) {
    for (const StallView& stall : job->Stalls(now, Threshold())) {
      // A name that waits only for other nodes gets twice the timeout: the
      // node hosting the missing rank times out first and names that rank
      // (its end reaches every node); this node's own is the backstop should
      // that daemon have no stall timeout.
      const absl::Duration limit = stall.remote ? 2 * policy_.timeout : policy_.timeout;
      const bool timed_out = policy_.timeout > absl::ZeroDuration() && stall.waiting >= limit;
      if (stall.waiting < policy_.warning && !timed_out) continue;
      std::string key =
          absl::StrCat(job->id(), "\n", stall.name, "\n", absl::ToUnixNanos(stall.since));
      seen.insert(key);
      bool fresh;
      {
        absl::MutexLock l(&mu_);
        fresh = reported_.insert(key).second;
      }
      if (fresh) {
        spdlog::warn("job {}: stall: {}", job->id(), stall.message);
        if (metrics_ != nullptr) metrics_->RecordStall();
      }
      if (timed_out) {
        spdlog::error("job {}: aborting after the stall timeout of {} s: {}", job->id(),
                      absl::ToInt64Seconds(policy_.timeout), stall.message);
        job->Abort(absl::DeadlineExceededError(
            absl::StrCat("job ", job->id(), " aborted by the stall timeout (",
                         absl::ToInt64Seconds(policy_.timeout), " s): ", stall.message)));
      }
    }
  }
  // Forget stalls that ended so the set stays bounded.
  absl::MutexLock l(&mu_);
  absl::erase_if(reported_, [&](const std::string& k) { return !seen.contains(k); });
}

}  // namespace kolo::daemon
