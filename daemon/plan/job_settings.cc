#include "daemon/plan/job_settings.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kolo::daemon::plan {
namespace {

absl::Status CheckCount(const char* what, uint32_t value, uint32_t lo, uint32_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("autotune ", what, " ", value, " is out of range ", lo, "..", hi));
  }
  return absl::OkStatus();
}

std::string Shown(const kolo::v1::JobSettings& s, int field) {
  switch (field) {
    case 0:
      return s.has_fusion_threshold_bytes() ? absl::StrCat(s.fusion_threshold_bytes(), " bytes")
                                            : "kolod's default";
    case 1:
      return s.has_cache_capacity() ? absl::StrCat(s.cache_capacity()) : "kolod's default";
    case 2:
      return s.autotune().enabled() ? "on" : "off";
    case 3:
      return absl::StrCat(s.autotune().warmup_samples());
    case 4:
      return absl::StrCat(s.autotune().steps_per_sample());
    case 5:
      return absl::StrCat(s.autotune().max_samples());
    default:
      return absl::StrCat(s.autotune().gaussian_process_noise());
  }
}

constexpr const char* kFieldNames[] = {
    "fusion threshold (HOROVOD_FUSION_THRESHOLD)",
    "cache capacity (HOROVOD_CACHE_CAPACITY)",
    "autotuning (HOROVOD_AUTOTUNE)",
    "autotune warm-up samples (HOROVOD_AUTOTUNE_WARMUP_SAMPLES)",
    "autotune steps per sample (HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE)",
    "autotune samples (HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES)",
    "autotune noise (HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE)",
};

}  // namespace

absl::StatusOr<JobSettings> Resolve(const kolo::v1::JobSettings& asked,
                                    const JobSettingsBounds& bounds) {
  JobSettings s;
  s.fusion_threshold_bytes =
      asked.has_fusion_threshold_bytes()
          ? std::min(asked.fusion_threshold_bytes(), bounds.fusion_threshold_bytes)
          : bounds.fusion_threshold_bytes;
  s.cache_capacity = asked.has_cache_capacity()
                         ? std::min(asked.cache_capacity(), bounds.cache_capacity)
                         : bounds.cache_capacity;
  const kolo::v1::AutotuneSettings& a = asked.autotune();
  s.autotune.enabled = a.enabled();
  if (a.warmup_samples() != 0) s.autotune.warmup_samples = a.warmup_samples();
  if (a.steps_per_sample() != 0) s.autotune.steps_per_sample = a.steps_per_sample();
  if (a.max_samples() != 0) s.autotune.max_samples = a.max_samples();
  if (a.gaussian_process_noise() != 0) s.autotune.noise = a.gaussian_process_noise();
  if (absl::Status st = CheckCount("warm-up samples", s.autotune.warmup_samples, 0, 100); !st.ok())
    return st;
  if (absl::Status st = CheckCount("steps per sample", s.autotune.steps_per_sample, 1, 10000);
      !st.ok())
    return st;
  if (absl::Status st = CheckCount("samples", s.autotune.max_samples, 1, 1000); !st.ok()) return st;
  if (!(s.autotune.noise >= 0 && s.autotune.noise <= 100)) {
    return absl::InvalidArgumentError(
        absl::StrCat("autotune noise ", s.autotune.noise, " is out of range 0..100"));
  }
  return s;
}

absl::Status SameAsked(const kolo::v1::JobSettings& a, const std::string& who_a,
                       const kolo::v1::JobSettings& b, const std::string& who_b) {
  // The tuner's counts matter only where it runs.
  const int fields = a.autotune().enabled() || b.autotune().enabled() ? 7 : 3;
  for (int field = 0; field < fields; ++field) {
    const std::string va = Shown(a, field);
    const std::string vb = Shown(b, field);
    if (va != vb) {
      return absl::FailedPreconditionError(absl::StrCat(who_b, " asks for ", kFieldNames[field],
                                                        " ", vb, ", ", who_a, " for ", va,
                                                        ": every rank of a job must set the same"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon::plan
