#include "daemon/plan/process_set_registry.h"

#include <vector>

#include "gtest/gtest.h"

namespace kolo::daemon::plan {
namespace {

TEST(ProcessSetRegistryTest, SetZeroIsEveryRankAndStays) {
  ProcessSetRegistry sets(3);
  ASSERT_NE(sets.Members(0), nullptr);
  EXPECT_EQ(*sets.Members(0), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(sets.added(), 0);
  EXPECT_EQ(sets.Remove(0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(sets.Contains(0));
  EXPECT_EQ(sets.MembersOrAll(7), (std::vector<int>{0, 1, 2}));
}

TEST(ProcessSetRegistryTest, AddsInOrderAndChecksTheRanks) {
  ProcessSetRegistry sets(4);
  EXPECT_EQ(*sets.Add({0, 2}), 1);
  EXPECT_EQ(*sets.Add({1, 3}), 2);
  EXPECT_EQ(sets.Add({3, 4}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sets.Add({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*sets.Members(2), (std::vector<int>{1, 3}));
  EXPECT_EQ(sets.added(), 2);
}

TEST(ProcessSetRegistryTest, AddAsTakesThePlansIdAndRemovalEndsARemoving) {
  ProcessSetRegistry sets(4);
  sets.AddAs(5, {3, 1});
  EXPECT_EQ(*sets.Members(5), (std::vector<int>{1, 3}));
  EXPECT_EQ(*sets.Add({0}), 6);  // ids stay in plan order
  EXPECT_TRUE(sets.CheckRemovable(5).ok());
  sets.BeginRemoval(5);
  EXPECT_TRUE(sets.Removing(5));
  EXPECT_EQ(sets.CheckRemovable(5),
            absl::FailedPreconditionError("process set 5 is being removed"));
  EXPECT_EQ(sets.CheckRemovable(0), absl::FailedPreconditionError("process set 0 does not exist"));
  sets.CancelRemoval(5);
  EXPECT_FALSE(sets.Removing(5));
  sets.BeginRemoval(5);
  EXPECT_TRUE(sets.Remove(5).ok());
  EXPECT_FALSE(sets.Removing(5));
  EXPECT_FALSE(sets.Contains(5));
  EXPECT_EQ(sets.Remove(5), absl::FailedPreconditionError("process set 5 does not exist"));
}

}  // namespace
}  // namespace kolo::daemon::plan
