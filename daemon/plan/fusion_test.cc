#include "daemon/plan/fusion.h"

#include <vector>

#include "gtest/gtest.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon::plan {
namespace {

TensorDesc Of(CollectiveKind kind, uint64_t bytes = 16) {
  TensorDesc d;
  d.kind = kind;
  d.shape = {static_cast<int64_t>(bytes / 4)};
  d.bytes = bytes;
  return d;
}

using Members = std::vector<std::vector<size_t>>;

Members MembersOf(const std::vector<FusionGroup>& groups) {
  Members out;
  for (const FusionGroup& g : groups) out.push_back(g.members);
  return out;
}

TEST(FusionRuleTest, AlignMemberRoundsUpToSixtyFour) {
  EXPECT_EQ(kFusionAlignment, 64u);
  EXPECT_EQ(AlignMember(0), 0u);
  EXPECT_EQ(AlignMember(1), 64u);
  EXPECT_EQ(AlignMember(64), 64u);
  EXPECT_EQ(AlignMember(65), 128u);
}

TEST(FusionRuleTest, LayoutAlignsMembersAndHasNoTrailingPadding) {
  FusionLayout one = LayOut(std::vector<uint64_t>{100});
  EXPECT_EQ(one.offsets, (std::vector<uint64_t>{0}));
  EXPECT_EQ(one.total_bytes, 100u);  // exactly the tensor
  FusionLayout many = LayOut(std::vector<uint64_t>{100, 10, 0, 200, 64});
  EXPECT_EQ(many.offsets, (std::vector<uint64_t>{0, 128, 192, 192, 448}));
  EXPECT_EQ(many.total_bytes, 512u);
  EXPECT_EQ(LayOut({}).total_bytes, 0u);
}

TEST(FusionRuleTest, SameKindDtypeSetAndMemoryFuse) {
  const TensorDesc a = Of(CollectiveKind::kAllreduce);
  TensorDesc b = a;
  EXPECT_TRUE(Fusable(a, b));
  b.shape = {99};  // shapes and sizes never matter
  b.bytes = 396;
  EXPECT_TRUE(Fusable(a, b));
  b = a;
  b.kind = CollectiveKind::kBroadcast;
  EXPECT_FALSE(Fusable(a, b));
  b = a;
  b.dtype = DType::kFloat16;
  EXPECT_FALSE(Fusable(a, b));
  b = a;
  b.process_set = 1;
  EXPECT_FALSE(Fusable(a, b));
  b = a;
  b.on_device = true;
  EXPECT_FALSE(Fusable(a, b));
  // Ranks' GPUs differ freely (each GPU is an NCCL rank).
  TensorDesc g0 = a, g1 = a;
  g0.on_device = g1.on_device = true;
  g0.device = 0;
  g1.device = 1;
  EXPECT_TRUE(Fusable(g0, g1));
}

TEST(FusionRuleTest, ReductionsFuseWithTheSameOpScalesAndCompression) {
  for (CollectiveKind kind : {CollectiveKind::kAllreduce, CollectiveKind::kReducescatter}) {
    const TensorDesc a = Of(kind);
    TensorDesc b = a;
    b.op = ReduceOp::kMax;
    EXPECT_FALSE(Fusable(a, b));
    b = a;
    b.prescale = 2;
    EXPECT_FALSE(Fusable(a, b));
    b = a;
    b.postscale = 2;
    EXPECT_FALSE(Fusable(a, b));
    b = a;
    b.compression = Compression::kFloat16;
    EXPECT_FALSE(Fusable(a, b));
    b = a;
    b.root_rank = 3;  // not a reduction's field
    EXPECT_TRUE(Fusable(a, b));
  }
}

TEST(FusionRuleTest, BroadcastsFuseWithTheSameRootOnly) {
  const TensorDesc a = Of(CollectiveKind::kBroadcast);
  TensorDesc b = a;
  b.op = ReduceOp::kMax;  // not a broadcast's field
  EXPECT_TRUE(Fusable(a, b));
  b.root_rank = 1;
  EXPECT_FALSE(Fusable(a, b));
}

TEST(FusionRuleTest, BarriersFuse) {
  EXPECT_TRUE(Fusable(Of(CollectiveKind::kBarrier), Of(CollectiveKind::kBarrier)));
}

TEST(FusionRuleTest, PerRankRowsJoinsAndSetChangesNeverFuse) {
  for (CollectiveKind kind :
       {CollectiveKind::kAllgather, CollectiveKind::kAlltoall, CollectiveKind::kJoin,
        CollectiveKind::kAddProcessSet, CollectiveKind::kRemoveProcessSet}) {
    EXPECT_FALSE(Fusable(Of(kind), Of(kind))) << CollectiveKindName(kind);
  }
}

TEST(FusionGroupingTest, GreedyInReadyOrderWithinTheThreshold) {
  std::vector<FusionCandidate> c = {
      {Of(CollectiveKind::kAllreduce, 400), {}}, {Of(CollectiveKind::kBroadcast, 10), {}},
      {Of(CollectiveKind::kAllreduce, 400), {}}, {Of(CollectiveKind::kAllreduce, 400), {}},
      {Of(CollectiveKind::kAllreduce, 100), {}}, {Of(CollectiveKind::kAllreduce, 5000), {}},
      {Of(CollectiveKind::kAllreduce, 8), {}}};
  std::vector<FusionGroup> groups = GroupForFusion(c, 1024);
  // 400 at 0, 400 at 448 (ends 848); a third would end at 1296; 100 fits
  // the first group at 896 (ends 996); 5000 goes alone; 8 would end the
  // first group at 1032, so it joins the third.
  EXPECT_EQ(MembersOf(groups), (Members{{0, 2, 4}, {1}, {3, 6}, {5}}));
  EXPECT_EQ(groups[0].layout.offsets, (std::vector<uint64_t>{0, 448, 896}));
  EXPECT_EQ(groups[0].layout.total_bytes, 996u);
  EXPECT_EQ(groups[2].layout.offsets, (std::vector<uint64_t>{0, 448}));
  EXPECT_EQ(groups[2].layout.total_bytes, 456u);
  EXPECT_EQ(groups[3].layout.total_bytes, 5000u);
}

TEST(FusionGroupingTest, ApartKeysKeepTensorsApart) {
  std::vector<FusionCandidate> c = {{Of(CollectiveKind::kAllreduce), {}},
                                    {Of(CollectiveKind::kAllreduce), {1}},
                                    {Of(CollectiveKind::kAllreduce), {}},
                                    {Of(CollectiveKind::kAllreduce), {1}},
                                    {Of(CollectiveKind::kAllreduce), {0, 1}}};
  EXPECT_EQ(MembersOf(GroupForFusion(c, 1 << 20)), (Members{{0, 2}, {1, 3}, {4}}));
}

TEST(FusionGroupingTest, AllgathersGoOnePerGroup) {
  std::vector<FusionCandidate> c = {{Of(CollectiveKind::kAllgather), {}},
                                    {Of(CollectiveKind::kAllgather), {}}};
  EXPECT_EQ(MembersOf(GroupForFusion(c, 1 << 20)), (Members{{0}, {1}}));
}

}  // namespace
}  // namespace kolo::daemon::plan
