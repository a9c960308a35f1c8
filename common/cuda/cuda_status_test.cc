// CUDA error conversion; needs the runtime library but no GPU.
#include "common/cuda/cuda_status.h"

#include "gtest/gtest.h"

namespace kolo::cuda {
namespace {

TEST(CudaStatusTest, SuccessIsOk) { EXPECT_TRUE(CudaStatus(cudaSuccess, "x").ok()); }

TEST(CudaStatusTest, NamesTheOperationAndTheError) {
  const absl::Status s = CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc of 64 bytes");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("cudaMalloc of 64 bytes"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("cudaErrorMemoryAllocation"), absl::string_view::npos) << s;
}

TEST(CudaStatusTest, MapsByWhatTheCallerCanDo) {
  EXPECT_EQ(CudaErrorToStatusCode(cudaErrorInvalidValue), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaErrorToStatusCode(cudaErrorNoDevice), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CudaErrorToStatusCode(cudaErrorNotSupported), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(CudaErrorToStatusCode(cudaErrorIllegalAddress), absl::StatusCode::kInternal);
  EXPECT_TRUE(IsStickyCudaError(cudaErrorIllegalAddress));
  EXPECT_FALSE(IsStickyCudaError(cudaErrorInvalidValue));
  EXPECT_NE(CudaStatus(cudaErrorIllegalAddress, "k").message().find("sticky"),
            absl::string_view::npos);
}

TEST(CudaStatusTest, LaunchAndDriverCodes) {
  EXPECT_TRUE(CudaLaunchStatus(0, "k").ok());
  EXPECT_EQ(CudaLaunchStatus(static_cast<int>(cudaErrorInvalidValue), "k").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CudaDriverStatus(0, "d").ok());
  EXPECT_EQ(CudaDriverStatus(1, "d").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kolo::cuda
