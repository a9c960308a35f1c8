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
            absl::FailedPreconditionError("allgather \"g\": cannot run while ranks 0-2 have "
                                          "joined (only allreduce, broadcast and barrier can)"));
  EXPECT_EQ(CheckRunsWithJoined(CollectiveKind::kAlltoall, "a", JoinedRanks{1, {}}),
            absl::FailedPreconditionError("alltoall \"a\": cannot run while 1 rank has joined "
                                          "(only allreduce, broadcast and barrier can)"));
  EXPECT_EQ(CheckRunsWithJoined(CollectiveKind::kAddProcessSet, "p", JoinedRanks{4, {}}).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RunnableTest, BroadcastRoot) {
  EXPECT_TRUE(CheckRootNotJoined("b", 2, false).ok());
  EXPECT_EQ(CheckRootNotJoined("b", 2, true),
            absl::FailedPreconditionError("broadcast \"b\": root rank 2 has joined"));
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

}  // namespace
}  // namespace kolo::daemon::plan
