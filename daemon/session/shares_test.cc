#include "daemon/session/shares.h"

#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

TEST(SharesTest, EachIdentityIsBoundedByItsShare) {
  Shares shares("calls", "--max_calls", ShareLimits{2, 10});
  auto a1 = shares.Take("uid 1");
  auto a2 = shares.Take("uid 1");
  ASSERT_TRUE(a1.ok() && a2.ok());
  auto a3 = shares.Take("uid 1");
  EXPECT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(a3.status().message(), "uid 1 holds 2 calls"))
      << a3.status().message();
  EXPECT_TRUE(absl::StrContains(a3.status().message(), "--max_calls=2")) << a3.status().message();
  // Another identity is not touched by the first one's full share.
  auto b1 = shares.Take("uid 2");
  EXPECT_TRUE(b1.ok()) << b1.status();
  EXPECT_EQ(shares.held("uid 1"), 2);
  EXPECT_EQ(shares.held("uid 2"), 1);
  EXPECT_EQ(shares.total_held(), 3);
}

TEST(SharesTest, TheTotalBoundsAllIdentitiesTogether) {
  Shares shares("connections", "--max_connections", ShareLimits{2, 3});
  std::vector<Shares::Lease> leases;
  for (const char* who : {"a", "a", "b"}) {
    auto l = shares.Take(who);
    ASSERT_TRUE(l.ok()) << l.status();
    leases.push_back(*std::move(l));
  }
  auto c = shares.Take("c");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(c.status().message(), "kolod holds 3 connections"))
      << c.status().message();
  leases.pop_back();
  EXPECT_TRUE(shares.Take("c").ok());
}

TEST(SharesTest, EndingALeaseGivesItsUnitBack) {
  Shares shares("calls", "--max_calls", ShareLimits{1, 4});
  {
    auto l = shares.Take("x");
    ASSERT_TRUE(l.ok());
    EXPECT_FALSE(shares.Take("x").ok());
    // Moving a lease moves the unit; it is given back once.
    Shares::Lease moved = *std::move(l);
    Shares::Lease again = std::move(moved);
    EXPECT_TRUE(again.held());
    EXPECT_EQ(shares.held("x"), 1);
  }
  EXPECT_EQ(shares.held("x"), 0);
  EXPECT_EQ(shares.total_held(), 0);
  auto l = shares.Take("x");
  ASSERT_TRUE(l.ok());
  l->Reset();
  l->Reset();
  EXPECT_EQ(shares.total_held(), 0);
  // Assigning over a held lease gives the old unit back.
  auto first = shares.Take("x");
  auto second = shares.Take("y");
  ASSERT_TRUE(first.ok() && second.ok());
  *first = *std::move(second);
  EXPECT_EQ(shares.held("x"), 0);
  EXPECT_EQ(shares.held("y"), 1);
}

}  // namespace
}  // namespace kolo::daemon
