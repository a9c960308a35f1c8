#include "daemon/plan/join_tracker.h"

#include <vector>

#include "gtest/gtest.h"

namespace kolo::daemon::plan {
namespace {

TEST(JoinTrackerTest, CountsMembersUntilEveryoneJoinedThenResets) {
  JoinTracker joins(3);
  EXPECT_FALSE(joins.any());
  EXPECT_FALSE(joins.all());
  EXPECT_EQ(joins.last_rank(), -1);

  EXPECT_TRUE(joins.Join(2, 2));
  EXPECT_TRUE(joins.any());
  EXPECT_TRUE(joins.joined(2));
  EXPECT_FALSE(joins.joined(0));
  EXPECT_EQ(joins.last_rank(), 2);
  EXPECT_EQ(joins.JoinedIn({0, 1, 2}), std::vector<int>({2}));
  EXPECT_EQ(joins.CountIn({1, 2}), 1);
  EXPECT_EQ(joins.CountIn({0, 1}), 0);

  EXPECT_TRUE(joins.Join(0, 7));  // a node's last rank, not the node
  EXPECT_TRUE(joins.Join(1, 5));
  EXPECT_TRUE(joins.all());
  EXPECT_EQ(joins.last_rank(), 5);

  joins.Reset();
  EXPECT_EQ(joins.size(), 3);
  EXPECT_FALSE(joins.any());
  EXPECT_EQ(joins.last_rank(), -1);
  EXPECT_TRUE(joins.JoinedIn({0, 1, 2}).empty());
}

TEST(JoinTrackerTest, ASecondJoinOrAMemberOutOfRangeChangesNothing) {
  JoinTracker joins(2);
  ASSERT_TRUE(joins.Join(1, 1));
  EXPECT_FALSE(joins.Join(1, 9));
  EXPECT_EQ(joins.last_rank(), 1);
  EXPECT_FALSE(joins.Join(-1, 0));
  EXPECT_FALSE(joins.Join(2, 0));
  EXPECT_FALSE(joins.joined(5));
  EXPECT_EQ(joins.CountIn({-3, 1, 8}), 1);
  EXPECT_FALSE(joins.all());
}

TEST(JoinTrackerTest, AnEmptyTrackerIsNeverAllJoined) {
  JoinTracker joins;
  EXPECT_FALSE(joins.all());
  joins.Reset(1);
  EXPECT_TRUE(joins.Join(0, 0));
  EXPECT_TRUE(joins.all());
}

}  // namespace
}  // namespace kolo::daemon::plan
