// A job's settings (proto/kolo/v1/job_settings.proto) as kolod applies
// them: the rule for what a rank may ask for, written once for the one-node
// job, the coordinator and the members.
//
//   1. Unset values take kolod's defaults (its --fusion_threshold and
//      --response_cache); a fusion threshold or cache capacity above kolod's
//      is lowered to kolod's (kolod's bound on one fused buffer and on the
//      coordinator's memory), and the rank learns the value in force from
//      its AttachResponse.
//   2. Autotuning takes bounded counts: 0..100 warm-up samples, 1..10,000
//      steps a sample, 1..1,000 samples; a noise in [0, 100]. Zero counts
//      take Horovod's defaults (3, 10, 20; noise 0.8).
//   3. Every rank and every node of a job asks for the same settings;
//      SameAsked names the first that differs.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/kolo/v1/job_settings.pb.h"

namespace kolo::daemon::plan {

struct AutotuneSettings {
  bool enabled = false;
  uint32_t warmup_samples = 3;
  uint32_t steps_per_sample = 10;
  uint32_t max_samples = 20;
  double noise = 0.8;
};

// kolod's defaults, which are also its bounds.
struct JobSettingsBounds {
  uint64_t fusion_threshold_bytes = uint64_t{64} << 20;
  uint32_t cache_capacity = 1024;
};

struct JobSettings {
  uint64_t fusion_threshold_bytes = uint64_t{64} << 20;
  uint32_t cache_capacity = 1024;
  AutotuneSettings autotune;
};

// The settings in force for `asked` under `bounds` (rules 1 and 2);
// INVALID_ARGUMENT for autotuning counts out of range.
absl::StatusOr<JobSettings> Resolve(const kolo::v1::JobSettings& asked,
                                    const JobSettingsBounds& bounds);

// OK when `a` and `b` ask for the same; else FAILED_PRECONDITION naming
// the first setting that differs and both values, `who_a` and `who_b`
// saying whose each is (e.g. "the job" and "rank 1").
absl::Status SameAsked(const kolo::v1::JobSettings& a, const std::string& who_a,
                       const kolo::v1::JobSettings& b, const std::string& who_b);

}  // namespace kolo::daemon::plan
