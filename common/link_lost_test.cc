#include "common/link_lost.h"

#include "gtest/gtest.h"

namespace kolo {
namespace {

TEST(LinkLost, TheTransportsFormIsRecognisedThroughWrapping) {
  const absl::Status lost = absl::AbortedError(
      absl::StrCat("UNAVAILABLE: ", LinkLostMessage(0, 1), ": Endpoint timeout (UCX -80)"));
  EXPECT_EQ(LinkLostMessage(0, 1), "node 0: connection to node 1 failed");
  EXPECT_TRUE(IsLinkLost(lost));
  EXPECT_TRUE(
      IsLinkLost(absl::UnavailableError(absl::StrCat("job j on node a: ", lost.message()))));
}

TEST(LinkLost, OtherFailuresAreNot) {
  EXPECT_FALSE(IsLinkLost(absl::OkStatus()));
  EXPECT_FALSE(IsLinkLost(absl::AbortedError("job j: rank 1 died")));
  EXPECT_FALSE(IsLinkLost(absl::AbortedError("node 0: connection to node 1 is slow")));
  EXPECT_FALSE(IsLinkLost(absl::InternalError("failed: connection to node")));
}

}  // namespace
}  // namespace kolo
