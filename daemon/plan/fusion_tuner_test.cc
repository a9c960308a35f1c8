#include "daemon/plan/fusion_tuner.h"

#include <cmath>
#include <map>

#include "gtest/gtest.h"

namespace kolo::daemon::plan {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A job of three tensors a step whose step time depends on the threshold:
// fastest at 4 MiB.
double StepSeconds(uint64_t threshold) {
  const double d = std::log2(threshold + 1.0) - std::log2(4.0 * kMiB);
  return 0.010 + 0.0005 * d * d;
}

void RunSteps(FusionTuner& tuner, int steps, absl::Time* now) {
  for (int i = 0; i < steps; ++i) {
    // The step's first name ends a sample; the new threshold plans the rest.
    tuner.Planned("grad/a", 1000, *now);
    const double s = StepSeconds(tuner.threshold());
    tuner.Planned("grad/b", 2000, *now + absl::Seconds(s / 2));
    tuner.Planned("grad/c", 3000, *now + absl::Seconds(s * 0.9));
    *now += absl::Seconds(s);
  }
}

TEST(FusionTuner, CandidatesAreNoFusionAndPowersOfTwoUpToTheBound) {
  FusionTuner t(AutotuneSettings{true, 0, 1, 5, 0.8}, 64 * kMiB, 64 * kMiB);
  const std::vector<uint64_t>& c = t.candidates();
  ASSERT_EQ(c.size(), 12u);
  EXPECT_EQ(c.front(), 0u);
  EXPECT_EQ(c[1], uint64_t{64} << 10);
  EXPECT_EQ(c.back(), 64 * kMiB);
  FusionTuner odd(AutotuneSettings{true, 0, 1, 5, 0.8}, 3 * kMiB, 5 * kMiB);
  EXPECT_NE(std::find(odd.candidates().begin(), odd.candidates().end(), 3 * kMiB),
            odd.candidates().end());
  EXPECT_EQ(odd.candidates().back(), 5 * kMiB);
  EXPECT_EQ(odd.threshold(), 3 * kMiB);
}

TEST(FusionTuner, WarmsUpMeasuresTheStartThenKeepsTheBest) {
  const AutotuneSettings settings{true, 2, 4, 10, 0.2};
  FusionTuner t(settings, 64 * kMiB, 64 * kMiB);
  absl::Time now = absl::UnixEpoch();
  // One step more than the samples span: the first marker only starts. The
  // model's best is not the start, so 6 samples check it against the start.
  RunSteps(t, 1 + 4 * (2 + 10 + 6), &now);
  TunerReport r = t.Report(0);
  ASSERT_EQ(r.total, 18u);
  EXPECT_TRUE(r.done);
  for (int i = 12; i < 18; ++i) {
    EXPECT_EQ(r.samples[i].fusion_threshold_bytes,
              i % 2 == 0 ? r.fusion_threshold_bytes : 64 * kMiB);
  }
  EXPECT_TRUE(r.samples[0].warmup);
  EXPECT_TRUE(r.samples[1].warmup);
  EXPECT_FALSE(r.samples[2].warmup);
  // Warm-up and the first used sample run at the start threshold.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r.samples[i].fusion_threshold_bytes, 64 * kMiB);
  for (const TunerSample& s : r.samples) {
    EXPECT_EQ(s.steps, 4u);
    EXPECT_NEAR(s.score, 6000.0 / StepSeconds(s.fusion_threshold_bytes), 1e-6 * s.score);
  }
  // A sampled threshold is kept, faster than the start.
  bool sampled = false;
  for (const TunerSample& s : r.samples) {
    sampled = sampled || (!s.warmup && s.fusion_threshold_bytes == r.fusion_threshold_bytes);
  }
  EXPECT_TRUE(sampled);
  EXPECT_EQ(t.threshold(), r.fusion_threshold_bytes);
  EXPECT_LT(StepSeconds(t.threshold()), StepSeconds(64 * kMiB));
  // Done: nothing more is measured.
  RunSteps(t, 20, &now);
  EXPECT_EQ(t.Report(0).total, 18u);
  EXPECT_EQ(t.Report(10).samples.size(), 8u);
  EXPECT_EQ(t.Report(10).samples[0].index, 10u);
}

// Scores that do not depend on the threshold beyond noise: the check
// against the start keeps the start unless the other wins by the margin.
TEST(FusionTuner, AFlatScoreKeepsTheStart) {
  const AutotuneSettings settings{true, 0, 1, 6, 0.8};
  FusionTuner t(settings, 64 * kMiB, 64 * kMiB);
  absl::Time now = absl::UnixEpoch();
  uint32_t i = 0;
  while (!t.Report(0).done && i < 100) {
    // The same 1000 bytes per step; the step takes 10 ms, but the 3rd
    // sample (a threshold other than the start) was a lucky 8 ms.
    const double ms = ++i == 3 ? 8 : 10;
    t.Planned("step", 1000, now);
    now += absl::Milliseconds(ms);
  }
  const TunerReport r = t.Report(0);
  ASSERT_TRUE(r.done);
  // The lucky one was the model's best, checked and refused.
  EXPECT_EQ(r.total, 6u + 2 * FusionTuner::kConfirmSamples);
  EXPECT_EQ(r.fusion_threshold_bytes, 64 * kMiB);
}

TEST(FusionTuner, ANameThatNeverRepeatsEndsNoSample) {
  FusionTuner t(AutotuneSettings{true, 0, 2, 3, 0.8}, kMiB, 64 * kMiB);
  absl::Time now = absl::UnixEpoch();
  for (int i = 0; i < 50; ++i) {
    t.Planned("once/" + std::to_string(i), 10, now);
    now += absl::Milliseconds(1);
  }
  EXPECT_EQ(t.Report(0).total, 0u);
  EXPECT_EQ(t.threshold(), kMiB);
}

}  // namespace
}  // namespace kolo::daemon::plan
