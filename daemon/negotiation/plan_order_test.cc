#include "daemon/negotiation/plan_order.h"

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

std::vector<PlannedEntry> Entries(std::vector<std::string> names) {
  std::vector<PlannedEntry> entries;
  for (std::string& n : names) {
    PlannedEntry e;
    e.names.push_back(std::move(n));
    entries.push_back(std::move(e));
  }
  return entries;
}

std::vector<std::string> Drained(PlanOrder& order) {
  std::deque<PlannedEntry> out;
  order.Drain(&out);
  std::vector<std::string> names;
  for (const PlannedEntry& e : out) names.push_back(e.names.front());
  return names;
}

using Names = std::vector<std::string>;

TEST(PlanOrderTest, UngatedPlansRunAsTheyArrive) {
  PlanOrder order;
  EXPECT_EQ(order.AddPlan(Entries({"a", "b"})), 1u);
  EXPECT_EQ(order.AddPlan(Entries({"c"})), 2u);
  EXPECT_EQ(Drained(order), (Names{"a", "b", "c"}));
  EXPECT_FALSE(order.pending());
}

TEST(PlanOrderTest, GatedPlansWaitForTheirRelease) {
  PlanOrder order;
  order.Gate();
  order.AddPlan(Entries({"p0"}));
  order.AddPlan(Entries({"p1"}));
  EXPECT_TRUE(Drained(order).empty());
  EXPECT_TRUE(order.pending());
  order.Add(PlanRelease{1});
  order.Add(Entries({"r0"}));
  EXPECT_EQ(Drained(order), (Names{"p0", "r0"}));
  order.Add(PlanRelease{2});
  EXPECT_EQ(Drained(order), (Names{"p1"}));
  EXPECT_FALSE(order.pending());
}

TEST(PlanOrderTest, AReleaseWhosePlanIsOnItsWayHoldsWhatComesAfter) {
  PlanOrder order;
  order.Gate();
  order.Add(Entries({"r0"}));
  order.Add(PlanRelease{1});
  order.Add(Entries({"r1"}));
  EXPECT_EQ(Drained(order), (Names{"r0"}));
  EXPECT_TRUE(order.pending());
  order.AddPlan(Entries({"p0"}));
  EXPECT_EQ(Drained(order), (Names{"p0", "r1"}));
}

TEST(PlanOrderTest, ASmallerReleaseReleasesNothingMore) {
  PlanOrder order;
  order.Gate();
  order.AddPlan(Entries({"p0"}));
  order.AddPlan(Entries({"p1"}));
  order.Add(PlanRelease{2});
  order.Add(PlanRelease{1});
  order.Add(Entries({"r0"}));
  EXPECT_EQ(Drained(order), (Names{"p0", "p1", "r0"}));
}

TEST(PlanOrderTest, AHugeReleaseCountHoldsTheOrderAndAllocatesNothing) {
  PlanOrder order;
  order.Gate();
  order.Add(PlanRelease{UINT64_MAX});
  order.Add(Entries({"r0"}));
  order.AddPlan(Entries({"p0"}));
  EXPECT_EQ(Drained(order), (Names{"p0"}));
  EXPECT_TRUE(order.pending());
}

TEST(PlanOrderTest, UngatingRunsLaterPlansAfterWhatWasOrdered) {
  PlanOrder order;
  order.Gate();
  order.Add(Entries({"r0"}));
  order.AddPlan(Entries({"p0"}));
  EXPECT_EQ(Drained(order), (Names{"r0"}));
  order.Ungate();
  order.AddPlan(Entries({"p1"}));
  EXPECT_EQ(Drained(order), (Names{"p0", "p1"}));
}

}  // namespace
}  // namespace kolo::daemon
