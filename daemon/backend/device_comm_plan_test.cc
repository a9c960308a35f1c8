#include "daemon/backend/device_comm_plan.h"

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(DeviceCommPlanTest, NumbersGpusNodeByNodeThenByOrdinal) {
  // Node 0: ranks 0,1 on GPU 1 and rank 2 on GPU 0; node 1: ranks 3,4 on GPU 0.
  auto plan = MakeDeviceCommPlan(5, {{{0, 1}, {1, 1}, {2, 0}}, {{3, 0}, {4, 0}}}, "id");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->nranks, 3);
  EXPECT_EQ(plan->unique_id, "id");
  EXPECT_THAT(plan->nccl_rank, ElementsAre(1, 1, 0, 2, 2));
  EXPECT_THAT(plan->device, ElementsAre(1, 1, 0, 0, 0));
  EXPECT_TRUE(ValidateDeviceCommPlan(*plan, 5).ok());

  auto lanes0 = LocalLanes(*plan, {0, 1, 2});
  ASSERT_TRUE(lanes0.ok());
  ASSERT_EQ(lanes0->size(), 2u);
  EXPECT_EQ((*lanes0)[0].nccl_rank, 0);
  EXPECT_EQ((*lanes0)[0].device, 0);
  EXPECT_THAT((*lanes0)[0].ranks, ElementsAre(2));
  EXPECT_EQ((*lanes0)[1].device, 1);
  EXPECT_THAT((*lanes0)[1].ranks, ElementsAre(0, 1));
  auto lanes1 = LocalLanes(*plan, {3, 4});
  ASSERT_TRUE(lanes1.ok());
  ASSERT_EQ(lanes1->size(), 1u);
  EXPECT_EQ((*lanes1)[0].nccl_rank, 2);
  EXPECT_THAT((*lanes1)[0].ranks, ElementsAre(3, 4));
}

TEST(DeviceCommPlanTest, UnplacedRanksStayOut) {
  auto plan = MakeDeviceCommPlan(3, {{{0, 0}}, {{2, 0}}}, "id");
  ASSERT_TRUE(plan.ok());
  EXPECT_THAT(plan->nccl_rank, ElementsAre(0, -1, 1));
  auto lanes = LocalLanes(*plan, {0, 1});
  ASSERT_TRUE(lanes.ok());
  ASSERT_EQ(lanes->size(), 1u);
  EXPECT_THAT((*lanes)[0].ranks, ElementsAre(0));
}

TEST(DeviceCommPlanTest, RefusesBadPlacements) {
  EXPECT_THAT(MakeDeviceCommPlan(2, {{{2, 0}}}, "").status().message(),
              HasSubstr("rank 2, outside [0, 2)"));
  EXPECT_THAT(MakeDeviceCommPlan(2, {{{0, -1}}}, "").status().message(),
              HasSubstr("CUDA device -1"));
  EXPECT_THAT(MakeDeviceCommPlan(2, {{{0, 0}}, {{0, 1}}}, "").status().message(),
              HasSubstr("rank 0 is placed twice"));
  EXPECT_THAT(MakeDeviceCommPlan(2, {{}, {}}, "").status().message(), HasSubstr("no rank"));
}

TEST(DeviceCommPlanTest, ValidatesReceivedPlans) {
  DeviceCommPlan plan;
  plan.nranks = 2;
  plan.nccl_rank = {0, 1};
  plan.device = {0, 0};
  EXPECT_TRUE(ValidateDeviceCommPlan(plan, 2).ok());
  EXPECT_THAT(ValidateDeviceCommPlan(plan, 3).message(), HasSubstr("covers 2"));
  plan.nccl_rank = {0, 2};
  EXPECT_THAT(ValidateDeviceCommPlan(plan, 2).message(), HasSubstr("out of range"));
  plan.nccl_rank = {0, -1};
  EXPECT_THAT(ValidateDeviceCommPlan(plan, 2).message(), HasSubstr("half placed"));
  plan.nccl_rank = {0, 0};
  plan.device = {0, 1};
  EXPECT_THAT(ValidateDeviceCommPlan(plan, 2).message(), HasSubstr("CUDA devices 0 and 1"));
  plan.nranks = 0;
  EXPECT_FALSE(ValidateDeviceCommPlan(plan, 2).ok());
  plan.nranks = 3;  // NCCL rank 2 hosts nobody: init would wait for it
  plan.nccl_rank = {0, 1};
  plan.device = {0, 1};
  EXPECT_THAT(ValidateDeviceCommPlan(plan, 2).message(), HasSubstr("NCCL rank 2 hosts no rank"));
  // Two NCCL ranks on one GPU of a node: a received plan that does this is
  // refused when the lanes are made.
  plan.nranks = 2;
  plan.nccl_rank = {0, 1};
  plan.device = {3, 3};
  EXPECT_THAT(LocalLanes(plan, {0, 1}).status().message(), HasSubstr("holds NCCL ranks 0 and 1"));
}

}  // namespace
}  // namespace kolo::daemon
