#include "daemon/transport/ucx_status.h"

#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

TEST(UcsToStatusTest, MapsCodesAndNamesTheOperation) {
  EXPECT_TRUE(UcsToStatus(UCS_OK, "x").ok());
  EXPECT_TRUE(UcsToStatus(UCS_INPROGRESS, "x").ok());
  absl::Status s = UcsToStatus(UCS_ERR_CONNECTION_RESET, "node 0: send to node 1");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("node 0: send to node 1"), absl::string_view::npos);
  EXPECT_EQ(UcsToStatus(UCS_ERR_ENDPOINT_TIMEOUT, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(UcsToStatus(UCS_ERR_CANCELED, "x").code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(UcsToStatus(UCS_ERR_MESSAGE_TRUNCATED, "x").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(UcsToStatus(UCS_ERR_NO_MEMORY, "x").code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace kolo::daemon
