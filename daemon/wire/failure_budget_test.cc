#include "daemon/wire/failure_budget.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

FailureBudgetLimits Limits() {
  FailureBudgetLimits l;
  l.max_failures = 3;
  l.window = absl::Seconds(60);
  l.backoff = absl::Seconds(30);
  l.max_tracked = 4;
  return l;
}

TEST(FailureBudgetTest, APeerPastItsBudgetIsRefusedForTheBackoffOnly) {
  FailureBudget budget(Limits());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(budget.Check("mallory", kStart).ok());
    EXPECT_FALSE(budget.RecordFailure("mallory", kStart + absl::Seconds(i)));
  }
  EXPECT_TRUE(budget.Check("mallory", kStart + absl::Seconds(3)).ok());
  EXPECT_TRUE(budget.RecordFailure("mallory", kStart + absl::Seconds(3)));  // the fourth
  absl::Status refused = budget.Check("mallory", kStart + absl::Seconds(4));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.message(), "peer mallory had more than 3")) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "another 29s")) << refused;
  // Another peer is not touched.
  EXPECT_TRUE(budget.Check("alice", kStart + absl::Seconds(4)).ok());
  // After the backoff it is served again, with a fresh budget.
  const absl::Time after = kStart + absl::Seconds(33);
  EXPECT_TRUE(budget.Check("mallory", after).ok());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(budget.RecordFailure("mallory", after));
  EXPECT_TRUE(budget.RecordFailure("mallory", after));
}

TEST(FailureBudgetTest, FailuresOutsideTheWindowAreForgotten) {
  FailureBudget budget(Limits());
  for (int i = 0; i < 20; ++i) {
    // Three per minute, never more than three within one window.
    const absl::Time t = kStart + absl::Seconds(61) * (i / 3) + absl::Seconds(i % 3);
    EXPECT_FALSE(budget.RecordFailure("slow", t)) << i;
    EXPECT_TRUE(budget.Check("slow", t).ok());
  }
}

TEST(FailureBudgetTest, TheTableIsBoundedAndKeepsRefusedPeers) {
  FailureBudget budget(Limits());
  for (int i = 0; i < 4; ++i) budget.RecordFailure("refused", kStart);
  ASSERT_FALSE(budget.Check("refused", kStart).ok());
  for (int p = 0; p < 100; ++p) {
    budget.RecordFailure(absl::StrCat("spoof", p), kStart + absl::Milliseconds(p));
    EXPECT_LE(budget.tracked(), 4u);
  }
  // The refused peer was not pushed out by the others.
  EXPECT_FALSE(budget.Check("refused", kStart + absl::Seconds(1)).ok());
  // Entries whose window and refusal are over make room first.
  const absl::Time later = kStart + absl::Minutes(5);
  budget.RecordFailure("late", later);
  EXPECT_TRUE(budget.Check("refused", later).ok());
  EXPECT_LE(budget.tracked(), 4u);
}

TEST(FailureBudgetTest, ATableFullOfRefusedPeersTracksNoMore) {
  FailureBudget budget(Limits());
  for (int p = 0; p < 4; ++p) {
    for (int i = 0; i < 4; ++i) budget.RecordFailure(absl::StrCat("r", p), kStart);
  }
  EXPECT_FALSE(budget.RecordFailure("new", kStart));
  EXPECT_EQ(budget.tracked(), 4u);
  for (int p = 0; p < 4; ++p) EXPECT_FALSE(budget.Check(absl::StrCat("r", p), kStart).ok());
}

}  // namespace
}  // namespace kolo::daemon
