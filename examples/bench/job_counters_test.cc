#include "examples/bench/job_counters.h"

#include "gtest/gtest.h"

namespace kolo::bench {
namespace {

TEST(FusionBetweenTest, TakesOutOneMemberExtras) {
  const JobCounters before{.responses = 10, .fused_tensors = 50};
  // 2 steps of 161 tensors in 6 responses, plus one barrier.
  const JobCounters after{.responses = 17, .fused_tensors = 50 + 322 + 1};
  const FusionDelta d = FusionBetween(before, after, 322);
  EXPECT_EQ(d.responses, 6u);
  EXPECT_EQ(d.tensors, 322u);
  EXPECT_DOUBLE_EQ(d.tensors_per_response(), 322.0 / 6);
}

TEST(FusionBetweenTest, ExactWhenNothingElseRan) {
  const FusionDelta d =
      FusionBetween({.responses = 0, .fused_tensors = 0}, {.responses = 4, .fused_tensors = 8}, 8);
  EXPECT_EQ(d.responses, 4u);
  EXPECT_EQ(d.tensors, 8u);
}

TEST(FusionBetweenTest, CountersGoingBackwardsGiveNothing) {
  const FusionDelta d =
      FusionBetween({.responses = 5, .fused_tensors = 9}, {.responses = 1, .fused_tensors = 1}, 8);
  EXPECT_EQ(d.responses, 0u);
  EXPECT_DOUBLE_EQ(d.tensors_per_response(), 0.0);
}

}  // namespace
}  // namespace kolo::bench
