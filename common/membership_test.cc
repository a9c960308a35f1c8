#include "common/membership.h"

#include "gtest/gtest.h"

namespace kolo {
namespace {

TEST(MembershipTest, AMembershipChangeIsAnAbortWithItsPrefix) {
  absl::Status s = MembershipChangedError("rank 2 died");
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "MEMBERSHIP_CHANGED: rank 2 died");
  EXPECT_TRUE(IsMembershipChanged(s));
}

TEST(MembershipTest, OtherAbortsAreNot) {
  EXPECT_FALSE(IsMembershipChanged(absl::AbortedError("job x: rank 2 died")));
  EXPECT_FALSE(IsMembershipChanged(absl::UnavailableError("MEMBERSHIP_CHANGED: no")));
  EXPECT_FALSE(IsMembershipChanged(absl::OkStatus()));
}

}  // namespace
}  // namespace kolo
