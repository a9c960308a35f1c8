#include "daemon/plan/runnable.h"

#include "gtest/gtest.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon::plan {
namespace {

TEST(RunnableTest, OnlyTheKindsThatRunWithJoinedRanksDo) {
  const JoinedRanks joined{2, {1, 3}};
  for (uint32_t code = 1; code <= kMaxCollectiveKind; ++code) {
    const auto kind = static_cast<CollectiveKind>(code);
    const absl::Status s = CheckRunsWithJoined(kind, "t", joined);
    EXPECT_EQ(s.ok(), Traits(kind).runs_with_joined) << CollectiveKindName(kind);
    // Nobody joined: every kind may run.
    EXPECT_TRUE(CheckRunsWithJoined(kind, "t", JoinedRanks{}).ok());
  }
}

TEST(RunnableTest, OneMessageWhetherTheRanksOrOnlyTheirCountAreKnown) {
  EXPECT_EQ(CheckRunsWithJoined(CollectiveKind::kAllgather, "g", JoinedRanks{3, {0, 1, 2}}),
            absl::FailedPreconditionError(
                "allgather \"g\": cannot run while ranks 0-2 have joined (allgather does not run "
                "with joined ranks; only allreduce and barrier do)"));
  EXPECT_EQ(CheckRunsWithJoined(CollectiveKind::kAlltoall, "a", JoinedRanks{1, {}}),
            absl::FailedPreconditionError(
                "alltoall \"a\": cannot run while 1 rank has joined (alltoall does not run with "
                "joined ranks; only allreduce and barrier do)"));
  EXPECT_EQ(CheckRunsWithJoined(CollectiveKind::kAddProcessSet, "p", JoinedRanks{4, {}}).code(),
            absl::StatusCode::kFailedPrecondition);
}

// As in Horovod: a broadcast fails on the ranks that did not join while one
// of its set has, whether the joined rank is its root or not.
TEST(RunnableTest, ABroadcastDoesNotRunWithJoinedRanks) {
  EXPECT_EQ(CheckRunsWithJoined(CollectiveKind::kBroadcast, "b", JoinedRanks{1, {0}}),
            absl::FailedPreconditionError(
                "broadcast \"b\": cannot run while rank 0 has joined (broadcast does not run "
                "with joined ranks; only allreduce and barrier do)"));
  EXPECT_EQ(CheckRunsWithJoined(CollectiveKind::kBroadcast, "b", JoinedRanks{2, {}}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(CheckRunsWithJoined(CollectiveKind::kBroadcast, "b", JoinedRanks{}).ok());
  EXPECT_TRUE(CheckRunsWithJoined(CollectiveKind::kAllreduce, "r", JoinedRanks{1, {0}}).ok());
  EXPECT_TRUE(CheckRunsWithJoined(CollectiveKind::kBarrier, "w", JoinedRanks{1, {0}}).ok());
}

TEST(RunnableTest, BroadcastRoot) {
  EXPECT_TRUE(CheckRootInSet("b", 2, 1, {0, 2}).ok());
  EXPECT_EQ(CheckRootInSet("b", 1, 5, {0, 2}),
            absl::FailedPreconditionError("broadcast \"b\": root rank 1 is not in process set 5"));
}

TEST(RunnableTest, ControlCollectivesInvolveTheWholeJob) {
  for (uint32_t code = 1; code <= kMaxCollectiveKind; ++code) {
    const auto kind = static_cast<CollectiveKind>(code);
    EXPECT_TRUE(CheckWholeJob(kind, "x", 0).ok());
    EXPECT_EQ(CheckWholeJob(kind, "x", 3).ok(), !IsControl(kind)) << CollectiveKindName(kind);
  }
  EXPECT_EQ(CheckWholeJob(CollectiveKind::kJoin, "join.0", 3),
            absl::InvalidArgumentError(
                "join \"join.0\": involves every rank of the job, not process set 3"));
}

TEST(RunnableTest, AlltoallSplitsMustCoverTheFirstDimension) {
  EXPECT_TRUE(CheckAlltoallSplits("a", 0, 6, {}, 3).ok());
  EXPECT_EQ(CheckAlltoallSplits("a", 1, 7, {}, 3),
            absl::FailedPreconditionError("alltoall \"a\": rank 1's first dimension 7 does not "
                                          "divide evenly among 3 ranks; pass splits"));
  EXPECT_TRUE(CheckAlltoallSplits("a", 0, 7, {3, 0, 4}, 3).ok());
  EXPECT_EQ(CheckAlltoallSplits("a", 2, 7, {3, 4}, 3),
            absl::FailedPreconditionError("alltoall \"a\": rank 2 sent 2 splits for 3 ranks"));
  EXPECT_EQ(CheckAlltoallSplits("a", 0, 7, {3, -1, 5}, 3),
            absl::FailedPreconditionError("alltoall \"a\": rank 0 sent split -1"));
  EXPECT_EQ(CheckAlltoallSplits("a", 0, 7, {3, 5, 0}, 3).message(),
            "alltoall \"a\": rank 0's splits sum to 8 or more, its first dimension is 7");
  EXPECT_EQ(CheckAlltoallSplits("a", 0, 7, {3, 1, 0}, 3).message(),
            "alltoall \"a\": rank 0's splits sum to 4, its first dimension is 7");
}

TEST(RunnableTest, SetChangesNameSetsThatCanChange) {
  ProcessSetRegistry sets(4);
  EXPECT_TRUE(CheckSetChange(CollectiveKind::kAddProcessSet, "ps", {0, 2}, sets).ok());
  const absl::Status bad = CheckSetChange(CollectiveKind::kAddProcessSet, "ps", {0, 9}, sets);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message().rfind("add_process_set \"ps\": ", 0), 0u) << bad;

  EXPECT_EQ(RemovedSetId({1}), 1);
  EXPECT_EQ(RemovedSetId({}), 0);
  EXPECT_EQ(RemovedSetId({1, 2}), 0);
  EXPECT_EQ(RemovedSetId({int64_t{1} << 40}), 0);
  EXPECT_EQ(CheckSetChange(CollectiveKind::kRemoveProcessSet, "rm", {1}, sets),
            absl::FailedPreconditionError(
                "remove_process_set \"rm\": process set 1 does not exist"));
  ASSERT_TRUE(sets.Add({0, 1}).ok());
  EXPECT_TRUE(CheckSetChange(CollectiveKind::kRemoveProcessSet, "rm", {1}, sets).ok());
  EXPECT_EQ(CheckSetChange(CollectiveKind::kRemoveProcessSet, "rm", {0}, sets).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(SetChangeError(CollectiveKind::kRemoveProcessSet, "rm", absl::OkStatus()).ok());
}

}  // namespace
}  // namespace kolo::daemon::plan
