// FusionTuner: tunes a job's fusion threshold while it runs (HOROVOD_AUTOTUNE;
// Kolo has no cycle time to tune beside it: it plans a name as soon as every
// rank has submitted it, so the threshold is what decides how much is fused).
//
//   1. The planner tells it every response it plans (the members' names and
//      bytes) and uses threshold() for the next plan.
//   2. A sample spans `steps_per_sample` training steps: the sample's first
//      name starts it, and each time that name is planned again a step has
//      passed. Its score is the bytes planned per second over those steps
//      (what the job's collectives move per second of training).
//   3. The first `warmup_samples` are recorded, not used. Then the first
//      sample measures the threshold the job started with, and Bayesian
//      optimisation (bayesian_optimizer.h) picks each next one among 0 (no
//      fusion) and the powers of two from 64 KiB to the job's bound.
//   4. After `max_samples` the model's best sampled threshold (where its
//      mean score is largest, so a lucky sample counts for less than
//      repeats) is checked against the start: kConfirmSamples samples of
//      each, taken in turns. The tuner keeps the best only if its mean there
//      beats the start's by kConfirmMargin, else the start, and measures no
//      more. (A tuned job is then at least as fast as an untuned one up to
//      the noise of those samples.)
//
// Thread-safety: thread-safe; the planner's thread calls Planned, anyone
// may read threshold() and Samples().
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/plan/bayesian_optimizer.h"
#include "daemon/plan/job_settings.h"

namespace kolo::daemon::plan {

struct TunerSample {
  uint32_t index = 0;
  uint64_t fusion_threshold_bytes = 0;
  double score = 0;  // bytes per second
  uint32_t steps = 0;
  double seconds = 0;
  bool warmup = false;
};

struct TunerReport {
  std::vector<TunerSample> samples;  // from the index asked for
  uint32_t total = 0;                // samples so far
  uint64_t fusion_threshold_bytes = 0;
  bool done = false;
};

class FusionTuner {
 public:
  static constexpr uint32_t kConfirmSamples = 3;
  static constexpr double kConfirmMargin = 1.01;

  // Starts at `start` (at most `bound`), tuning within [0, bound].
  FusionTuner(AutotuneSettings settings, uint64_t start, uint64_t bound);

  uint64_t threshold() const { return threshold_.load(std::memory_order_relaxed); }
  // A planned response's member `name`, counting `bytes` of it, at `now`.
  void Planned(const std::string& name, uint64_t bytes, absl::Time now);
  TunerReport Report(uint32_t since) const;

  // The thresholds it chooses among, ascending.
  const std::vector<uint64_t>& candidates() const { return candidates_; }

 private:
  void EndSample(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AutotuneSettings settings_;
  const std::vector<uint64_t> candidates_;
  std::atomic<uint64_t> threshold_;

  mutable absl::Mutex mu_;
  BayesianOptimizer optimizer_ ABSL_GUARDED_BY(mu_);
  const size_t start_index_;
  size_t current_ ABSL_GUARDED_BY(mu_);  // candidate index in use
  // Step 4: the model's best, the samples left, and each side's scores.
  size_t best_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t confirm_left_ ABSL_GUARDED_BY(mu_) = 0;
  double confirm_sum_[2] ABSL_GUARDED_BY(mu_) = {0, 0};  // best, start
  std::vector<TunerSample> samples_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  // The sample being measured.
  std::string marker_ ABSL_GUARDED_BY(mu_);
  absl::Time start_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t steps_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kolo::daemon::plan
