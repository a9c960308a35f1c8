// NCCL result conversion; needs the NCCL library but no GPU.
#include "daemon/backend/nccl/nccl_status.h"

#include "gtest/gtest.h"

namespace kolo::daemon::nccl {
namespace {

TEST(NcclStatusTest, SuccessIsOk) { EXPECT_TRUE(NcclStatus(ncclSuccess, "x").ok()); }

TEST(NcclStatusTest, MapsAndNames) {
  const absl::Status s = NcclStatus(ncclRemoteError, "ncclAllReduce of 4 float32");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("ncclAllReduce of 4 float32"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("ncclRemoteError"), absl::string_view::npos) << s;
  EXPECT_EQ(NcclResultToStatusCode(ncclInvalidArgument), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclResultToStatusCode(ncclInvalidUsage), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(NcclResultToStatusCode(ncclSystemError), absl::StatusCode::kUnavailable);
  EXPECT_EQ(NcclResultToStatusCode(ncclUnhandledCudaError), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace kolo::daemon::nccl
