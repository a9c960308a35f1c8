// A single-rank NCCL communicator on a real GPU (tag "gpu"): creation with
// the non-blocking config, an allreduce, async-error polling, abort, and the
// watchdog's deadline.
#include "daemon/backend/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "common/cuda/cuda_resources.h"
#include "common/testing/wait_until.h"
#include "daemon/backend/nccl/collective_watchdog.h"
#include "gtest/gtest.h"

namespace kolo::daemon::nccl {
namespace {

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
    auto d = cuda::CudaDevice::Open(0);
    ASSERT_TRUE(d.ok()) << d.status();
    device_.emplace(std::move(*d));
  }
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> SingleRank() {
    auto id = NewNcclUniqueId();
    if (!id.ok()) return id.status();
    return NcclCommunicator::Create(*id, 1, 0, 0, absl::Seconds(60));
  }
  std::optional<cuda::CudaDevice> device_;
};

TEST_F(NcclCommunicatorTest, AllReducesOnOneRank) {
  auto comm = SingleRank();
  ASSERT_TRUE(comm.ok()) << comm.status();
  auto stream = cuda::CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  const size_t n = 1000003;
  auto buf = cuda::DeviceBuffer::Allocate(n * sizeof(float));
  ASSERT_TRUE(buf.ok());
  std::vector<float> host(n, 1.5f), back(n);
  ASSERT_EQ(cudaMemcpy(buf->data(), host.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE((*comm)
                  ->AllReduce(buf->data(), buf->data(), n, DType::kFloat32, ReduceOp::kSum,
                              stream->get(), absl::Now() + absl::Seconds(30))
                  .ok());
  ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), buf->data(), n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  EXPECT_TRUE((*comm)->AsyncError().ok());
  EXPECT_EQ((*comm)->size(), 1);
}

TEST_F(NcclCommunicatorTest, AbortMakesLaterCallsFail) {
  auto comm = SingleRank();
  ASSERT_TRUE(comm.ok()) << comm.status();
  (*comm)->Abort(absl::AbortedError("test abort"));
  EXPECT_TRUE((*comm)->aborted());
  EXPECT_EQ((*comm)->AsyncError().code(), absl::StatusCode::kFailedPrecondition);
  auto stream = cuda::CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  const absl::Status s = (*comm)->AllReduce(nullptr, nullptr, 0, DType::kFloat32, ReduceOp::kSum,
                                            stream->get(), absl::Now() + absl::Seconds(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("test abort"), absl::string_view::npos) << s;
}

TEST_F(NcclCommunicatorTest, WatchdogAbortsAtTheDeadline) {
  auto comm = SingleRank();
  ASSERT_TRUE(comm.ok()) << comm.status();
  CollectiveWatchdog watchdog(comm->get(), &*device_, absl::Milliseconds(1));
  watchdog.Begin("allreduce \"stuck\"", absl::Now() - absl::Seconds(1));
  EXPECT_TRUE(WaitUntil([&] { return !watchdog.failure().ok(); }, absl::Seconds(30)));
  watchdog.End();
  EXPECT_EQ(watchdog.failure().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE((*comm)->aborted());
}

}  // namespace
}  // namespace kolo::daemon::nccl
