// StallInspector: a thread that looks at every job periodically and makes a
// hang explain itself. A tensor waiting longer than the warning is logged once
// (which ranks it waits for, which submitted, or that it is stuck executing)
// and counted; with a timeout set, a tensor waiting that long aborts its job
// with DEADLINE_EXCEEDED on every rank, also when the timeout is shorter than
// the warning.
//
// Thread-safety: thread-safe; its thread only reads jobs through their locks.
#pragma once

#include <string>
#include <thread>

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/job/job_registry.h"
#include "daemon/observe/metrics.h"

namespace kolo::daemon {

struct StallPolicy {
  absl::Duration warning = absl::Seconds(60);
  absl::Duration timeout = absl::ZeroDuration();  // zero: never abort
};

class StallInspector {
 public:
  // Starts the inspector's thread. `registry` and `metrics` (may be null)
  // must outlive the inspector.
  static absl::StatusOr<std::unique_ptr<StallInspector>> Start(JobRegistry* registry,
                                                               Metrics* metrics,
                                                               StallPolicy policy);
  ~StallInspector();
  StallInspector(const StallInspector&) = delete;
  StallInspector& operator=(const StallInspector&) = delete;

  // One inspection at `now` (the thread calls this; tests may too).
  void InspectOnce(absl::Time now);

  const StallPolicy& policy() const { return policy_; }

 private:
  StallInspector(JobRegistry* registry, Metrics* metrics, StallPolicy policy);
  void Loop();
  // The shortest wait that matters: the warning, or a shorter timeout.
  absl::Duration Threshold() const;

  JobRegistry* const registry_;
  Metrics* const metrics_;
  const StallPolicy policy_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Stalls already reported: job, tensor and since when.
  absl::flat_hash_set<std::string> reported_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kolo::daemon
