// The CUDA RAII wrappers on a real GPU (tag "gpu"): streams, events,
// interprocess events, buffers and allocation lookup. Cross-process IPC
// mapping is covered by //tests/gpu:ipc_test.
#include "common/cuda/cuda_resources.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "common/cuda/allocation_range.h"
#include "gtest/gtest.h"

namespace kolo::cuda {
namespace {

class CudaResourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaResourcesTest, OpensDeviceAndRejectsBadOrdinal) {
  auto d = CudaDevice::Open(0);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->name().empty());
  EXPECT_EQ(CudaDevice::Open(4096).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaResourcesTest, StreamEventAndBufferRoundTrip) {
  ASSERT_TRUE(CudaDevice::Open(0).ok());
  auto stream = CudaStream::Create();
  auto event = CudaEvent::Create();
  ASSERT_TRUE(stream.ok() && event.ok());
  auto buf = DeviceBuffer::Allocate(1 << 20);
  ASSERT_TRUE(buf.ok()) << buf.status();
  std::vector<uint8_t> host(1 << 20, 7), back(1 << 20, 0);
  ASSERT_EQ(
      cudaMemcpyAsync(buf->data(), host.data(), host.size(), cudaMemcpyHostToDevice, stream->get()),
      cudaSuccess);
  ASSERT_TRUE(event->Record(stream->get()).ok());
  ASSERT_EQ(cudaEventSynchronize(event->get()), cudaSuccess);
  auto done = event->IsComplete();
  ASSERT_TRUE(done.ok() && *done);
  ASSERT_EQ(cudaMemcpy(back.data(), buf->data(), back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);

  // Growing keeps the object valid; moving transfers ownership.
  ASSERT_TRUE(buf->Reserve(4 << 20).ok());
  EXPECT_GE(buf->size(), 4u << 20);
  DeviceBuffer moved = std::move(*buf);
  EXPECT_EQ(buf->data(), nullptr);
  EXPECT_NE(moved.data(), nullptr);
  CudaStream s2 = std::move(*stream);
  EXPECT_EQ(stream->get(), nullptr);
}

TEST_F(CudaResourcesTest, InterprocessEventExportsAHandle) {
  ASSERT_TRUE(CudaDevice::Open(0).ok());
  auto e = CudaEvent::CreateInterprocess();
  ASSERT_TRUE(e.ok()) << e.status();
  auto h = e->ExportIpcHandle();
  ASSERT_TRUE(h.ok()) << h.status();
  // A plain event is not interprocess: exporting it fails cleanly.
  auto plain = CudaEvent::Create();
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->ExportIpcHandle().ok());
}

TEST_F(CudaResourcesTest, FindsTheAllocationOfAnInteriorPointer) {
  ASSERT_TRUE(CudaDevice::Open(0).ok());
  auto buf = DeviceBuffer::Allocate(3 << 20);
  ASSERT_TRUE(buf.ok());
  auto range = FindAllocation(buf->data() + 12345);
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->base, reinterpret_cast<uint64_t>(buf->data()));
  EXPECT_GE(range->size, 3u << 20);
  int host = 0;
  EXPECT_FALSE(FindAllocation(&host).ok());
}

TEST_F(CudaResourcesTest, PinnedBufferGrows) {
  PinnedBuffer p;
  ASSERT_TRUE(p.Reserve(100).ok());
  p.data()[99] = 1;
  ASSERT_TRUE(p.Reserve(1 << 16).ok());
  EXPECT_GE(p.size(), 1u << 16);
}

}  // namespace
}  // namespace kolo::cuda
