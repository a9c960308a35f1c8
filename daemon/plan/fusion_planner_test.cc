#include "daemon/plan/fusion_planner.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

constexpr uint64_t kThreshold = 1024;

struct Spec {
  std::string name;
  uint64_t bytes = 64;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  double prescale = 1.0;
  double postscale = 1.0;
  int root = 0;
  int device = -1;  // -1: host tensors
};

// A two-rank ready set whose ranks agree on `spec`.
ReadySet MakeSet(const Spec& spec) {
  ReadySet set;
  set.name = spec.name;
  for (int rank = 0; rank < 2; ++rank) {
    Request r;
    r.rank = rank;
    r.name = spec.name;
    r.kind = spec.kind;
    r.dtype = spec.dtype;
    r.op = spec.op;
    r.prescale = spec.prescale;
    r.postscale = spec.postscale;
    r.root_rank = spec.root;
    r.bytes = spec.bytes;
    r.shape = {static_cast<int64_t>(spec.bytes)};
    if (spec.device >= 0) {
      r.device = cuda::DeviceIo{};
      r.device->input.device = spec.device;
      r.device->output.device = spec.device;
    }
    set.requests.push_back(std::move(r));
  }
  return set;
}

std::vector<ReadySet> MakeSets(const std::vector<Spec>& specs) {
  std::vector<ReadySet> sets;
  for (const Spec& s : specs) sets.push_back(MakeSet(s));
  return sets;
}

// Member names of each response, in order.
std::vector<std::vector<std::string>> Names(const std::vector<Response>& responses) {
  std::vector<std::vector<std::string>> out;
  for (const Response& r : responses) {
    out.emplace_back();
    for (const FusedMember& m : r.members) out.back().push_back(m.set.name);
  }
  return out;
}

using Groups = std::vector<std::vector<std::string>>;

TEST(FusionPlannerTest, EmptyInputGivesNoResponses) {
  EXPECT_TRUE(PlanFusion({}, kThreshold).empty());
}

TEST(FusionPlannerTest, SameKeySmallTensorsFuseWithAlignedIncreasingOffsets) {
  std::vector<Response> plan = PlanFusion(MakeSets({{.name = "a", .bytes = 100},
                                                    {.name = "b", .bytes = 10},
                                                    {.name = "c", .bytes = 200},
                                                    {.name = "d", .bytes = 64}}),
                                          kThreshold);
  ASSERT_EQ(plan.size(), 1u);
  const Response& r = plan[0];
  EXPECT_EQ(Names(plan), (Groups{{"a", "b", "c", "d"}}));
  std::vector<uint64_t> offsets;
  for (const FusedMember& m : r.members) offsets.push_back(m.offset);
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 128, 192, 448}));
  EXPECT_EQ(r.total_bytes, 448u + 64u);
  for (size_t i = 0; i < r.members.size(); ++i) {
    EXPECT_EQ(r.members[i].offset % 64, 0u);
    if (i > 0) {
      const FusedMember& prev = r.members[i - 1];
      EXPECT_GE(r.members[i].offset, prev.offset + prev.set.requests.front().bytes)
          << "member " << i << " overlaps the one before";
    }
  }
  EXPECT_EQ(r.kind, CollectiveKind::kAllreduce);
  EXPECT_EQ(r.dtype, DType::kFloat32);
  EXPECT_EQ(r.op, ReduceOp::kSum);
  // Every rank's request travels with its member.
  EXPECT_EQ(r.members[2].set.requests.size(), 2u);
}

TEST(FusionPlannerTest, ResponseCarriesTheGroupKey) {
  std::vector<Response> plan = PlanFusion(MakeSets({{.name = "a",
                                                     .dtype = DType::kBFloat16,
                                                     .op = ReduceOp::kAverage,
                                                     .prescale = 0.5,
                                                     .postscale = 4}}),
                                          kThreshold);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].dtype, DType::kBFloat16);
  EXPECT_EQ(plan[0].op, ReduceOp::kAverage);
  EXPECT_EQ(plan[0].prescale, 0.5);
  EXPECT_EQ(plan[0].postscale, 4);
  EXPECT_EQ(plan[0].total_bytes, 64u);
}

TEST(FusionPlannerTest, DifferentDtypeDoesNotFuse) {
  EXPECT_EQ(Names(PlanFusion(MakeSets({{.name = "a"}, {.name = "b", .dtype = DType::kFloat16}}),
                             kThreshold)),
            (Groups{{"a"}, {"b"}}));
}

TEST(FusionPlannerTest, DifferentOpDoesNotFuse) {
  EXPECT_EQ(
      Names(PlanFusion(MakeSets({{.name = "a"}, {.name = "b", .op = ReduceOp::kMax}}), kThreshold)),
      (Groups{{"a"}, {"b"}}));
}

TEST(FusionPlannerTest, DifferentPrescaleDoesNotFuse) {
  EXPECT_EQ(
      Names(PlanFusion(MakeSets({{.name = "a"}, {.name = "b", .prescale = 0.5}}), kThreshold)),
      (Groups{{"a"}, {"b"}}));
}

TEST(FusionPlannerTest, DifferentPostscaleDoesNotFuse) {
  EXPECT_EQ(
      Names(PlanFusion(MakeSets({{.name = "a"}, {.name = "b", .postscale = 0.5}}), kThreshold)),
      (Groups{{"a"}, {"b"}}));
}

TEST(FusionPlannerTest, AllreduceAndBroadcastDoNotFuse) {
  std::vector<Response> plan = PlanFusion(
      MakeSets({{.name = "a"}, {.name = "b", .kind = CollectiveKind::kBroadcast}}), kThreshold);
  EXPECT_EQ(Names(plan), (Groups{{"a"}, {"b"}}));
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[1].kind, CollectiveKind::kBroadcast);
}

TEST(FusionPlannerTest, BroadcastsFuseOnlyWithTheSameRoot) {
  constexpr auto kB = CollectiveKind::kBroadcast;
  std::vector<Response> plan = PlanFusion(MakeSets({{.name = "a", .kind = kB, .root = 0},
                                                    {.name = "b", .kind = kB, .root = 1},
                                                    {.name = "c", .kind = kB, .root = 0},
                                                    {.name = "d", .kind = kB, .root = 1}}),
                                          kThreshold);
  EXPECT_EQ(Names(plan), (Groups{{"a", "c"}, {"b", "d"}}));
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].root_rank, 0);
  EXPECT_EQ(plan[1].root_rank, 1);
}

TEST(FusionPlannerTest, ResponsesOrderedByFirstMemberAndMembersKeepReadyOrder) {
  std::vector<Response> plan = PlanFusion(MakeSets({{.name = "f32-1"},
                                                    {.name = "f16-1", .dtype = DType::kFloat16},
                                                    {.name = "f32-2"},
                                                    {.name = "i32-1", .dtype = DType::kInt32},
                                                    {.name = "f16-2", .dtype = DType::kFloat16},
                                                    {.name = "f32-3"}}),
                                          kThreshold);
  EXPECT_EQ(Names(plan), (Groups{{"f32-1", "f32-2", "f32-3"}, {"f16-1", "f16-2"}, {"i32-1"}}));
}

TEST(FusionPlannerTest, ThresholdStartsANewGroup) {
  // 400 + 400 fit in 1024 (second at 448); a third would end at 1296.
  std::vector<Response> plan = PlanFusion(MakeSets({{.name = "a", .bytes = 400},
                                                    {.name = "b", .bytes = 400},
                                                    {.name = "c", .bytes = 400},
                                                    {.name = "d", .bytes = 400}}),
                                          kThreshold);
  EXPECT_EQ(Names(plan), (Groups{{"a", "b"}, {"c", "d"}}));
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].total_bytes, 848u);
  EXPECT_EQ(plan[1].members[0].offset, 0u);
}

TEST(FusionPlannerTest, TensorFillingTheThresholdExactlyStillFuses) {
  std::vector<Response> plan =
      PlanFusion(MakeSets({{.name = "a", .bytes = 512}, {.name = "b", .bytes = 512}}), kThreshold);
  EXPECT_EQ(Names(plan), (Groups{{"a", "b"}}));
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].total_bytes, kThreshold);
}

TEST(FusionPlannerTest, TensorLargerThanThresholdGoesAlone) {
  std::vector<Response> plan = PlanFusion(MakeSets({{.name = "small-1", .bytes = 100},
                                                    {.name = "big", .bytes = kThreshold + 1},
                                                    {.name = "small-2", .bytes = 100},
                                                    {.name = "huge", .bytes = 10 * kThreshold},
                                                    {.name = "small-3", .bytes = 100}}),
                                          kThreshold);
  EXPECT_EQ(Names(plan), (Groups{{"small-1", "small-2", "small-3"}, {"big"}, {"huge"}}));
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[1].members[0].offset, 0u);
  EXPECT_EQ(plan[1].total_bytes, kThreshold + 1);
}

TEST(FusionPlannerTest, TensorLargerThanThresholdFirstStillGoesAlone) {
  EXPECT_EQ(
      Names(PlanFusion(MakeSets({{.name = "big", .bytes = 5000}, {.name = "small", .bytes = 8}}),
                       kThreshold)),
      (Groups{{"big"}, {"small"}}));
}

TEST(FusionPlannerTest, NoFusedGroupExceedsTheThreshold) {
  std::vector<Spec> specs;
  // A fixed, varied sequence of sizes and two keys.
  for (int i = 0; i < 200; ++i) {
    Spec s;
    s.name = "t" + std::to_string(i);
    s.bytes = static_cast<uint64_t>((i * 97 + 13) % 700);
    if (i % 17 == 0) s.bytes = kThreshold + i;  // occasionally oversized
    if (i % 3 == 0) s.dtype = DType::kFloat16;
    specs.push_back(s);
  }
  std::vector<Response> plan = PlanFusion(MakeSets(specs), kThreshold);
  size_t members = 0;
  size_t next_first = 0;  // first members appear in ready order
  for (const Response& r : plan) {
    ASSERT_FALSE(r.members.empty());
    members += r.members.size();
    if (r.members.size() > 1) {
      EXPECT_LE(r.total_bytes, kThreshold);
    } else {
      EXPECT_EQ(r.total_bytes, r.members[0].set.requests.front().bytes);
    }
    int first = std::stoi(r.members[0].set.name.substr(1));
    EXPECT_GE(static_cast<size_t>(first), next_first);
    next_first = first + 1;
    int prev = -1;
    for (const FusedMember& m : r.members) {
      int index = std::stoi(m.set.name.substr(1));
      EXPECT_GT(index, prev) << "members out of ready order";
      prev = index;
      EXPECT_EQ(m.set.requests.front().dtype, r.dtype);
      EXPECT_EQ(m.offset % 64, 0u);
    }
  }
  EXPECT_EQ(members, specs.size()) << "a ready set was lost or duplicated";
}

TEST(FusionPlannerTest, ZeroByteTensorsFuse) {
  std::vector<Response> plan = PlanFusion(MakeSets({{.name = "e1", .bytes = 0},
                                                    {.name = "x", .bytes = 10},
                                                    {.name = "e2", .bytes = 0},
                                                    {.name = "y", .bytes = 10}}),
                                          kThreshold);
  EXPECT_EQ(Names(plan), (Groups{{"e1", "x", "e2", "y"}}));
  ASSERT_EQ(plan.size(), 1u);
  std::vector<uint64_t> offsets;
  for (const FusedMember& m : plan[0].members) offsets.push_back(m.offset);
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 0, 64, 64}));
  EXPECT_EQ(plan[0].total_bytes, 74u);
}

TEST(FusionPlannerTest, OnlyZeroByteTensorsMakeAnEmptyFusedBuffer) {
  std::vector<Response> plan =
      PlanFusion(MakeSets({{.name = "e1", .bytes = 0}, {.name = "e2", .bytes = 0}}), kThreshold);
  EXPECT_EQ(Names(plan), (Groups{{"e1", "e2"}}));
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].total_bytes, 0u);
}

TEST(FusionPlannerTest, DeviceAndHostTensorsDoNotFuse) {
  Spec host{.name = "host"};
  Spec gpu0{.name = "gpu0", .device = 0};
  Spec gpu0b{.name = "gpu0b", .device = 0};
  Spec gpu1{.name = "gpu1", .device = 1};
  Spec host2{.name = "host2"};
  std::vector<Response> out = PlanFusion(MakeSets({host, gpu0, gpu1, gpu0b, host2}), kThreshold);
  // Tensors of one rank on different GPUs still fuse: the backend places
  // each request on its own GPU's lane.
  EXPECT_EQ(Names(out), (Groups{{"host", "host2"}, {"gpu0", "gpu1", "gpu0b"}}));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_FALSE(out[0].on_device);
  EXPECT_TRUE(out[1].on_device);
}

TEST(FusionPlannerTest, AllgathersAndAlltoallsAreNeverFused) {
  // Their layout depends on every rank's rows: one tensor per response, as
  // the coordinator plans them across nodes.
  constexpr auto kAg = CollectiveKind::kAllgather;
  constexpr auto kA2a = CollectiveKind::kAlltoall;
  std::vector<Response> plan = PlanFusion(MakeSets({{.name = "ag1", .kind = kAg},
                                                    {.name = "a2a1", .kind = kA2a},
                                                    {.name = "ag2", .kind = kAg},
                                                    {.name = "a2a2", .kind = kA2a}}),
                                          kThreshold);
  EXPECT_EQ(Names(plan), (Groups{{"ag1"}, {"a2a1"}, {"ag2"}, {"a2a2"}}));
  for (const Response& r : plan) EXPECT_EQ(r.total_bytes, 64u);
}

TEST(FusionPlannerTest, BarriersFuse) {
  constexpr auto kB = CollectiveKind::kBarrier;
  EXPECT_EQ(Names(PlanFusion(MakeSets({{.name = "b1", .kind = kB}, {.name = "b2", .kind = kB}}),
                             kThreshold)),
            (Groups{{"b1", "b2"}}));
}

}  // namespace
}  // namespace kolo::daemon
