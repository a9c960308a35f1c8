// The SDK's device-tensor export on a real GPU (tag "gpu"): allocation base
// and offset, handle caching, refusal of host memory, and the event pool.
// Opening the handles in another process is //tests/gpu:ipc_test.
#include "client/cuda/device_tensor_export.h"

#include <cuda_runtime_api.h>

#include "gtest/gtest.h"

namespace kolo::client::cuda {
namespace {

class DeviceTensorExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
};

TEST_F(DeviceTensorExportTest, ExportsBaseHandleAndOffset) {
  void* base = nullptr;
  ASSERT_EQ(cudaMalloc(&base, 1 << 20), cudaSuccess);
  DeviceTensorExporter exporter;
  IpcHandleBytes event{};
  event[0] = 9;
  auto a = exporter.Export(static_cast<uint8_t*>(base) + 4096, 1000, event);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->offset, 4096u);
  EXPECT_EQ(a->bytes, 1000u);
  EXPECT_EQ(a->device, 0);
  EXPECT_EQ(a->event, event);
  auto b = exporter.Export(base, 16, event);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->memory, a->memory);  // one handle per allocation
  EXPECT_EQ(exporter.cached_allocations(), 1u);
  EXPECT_EQ(exporter.Export(static_cast<uint8_t*>(base) + 4096, 1 << 20, event).status().code(),
            absl::StatusCode::kInvalidArgument);
  exporter.Forget(base);
  EXPECT_EQ(exporter.cached_allocations(), 0u);
  cudaFree(base);
}

// A freed allocation's address and size reused by a new one: the new one
// gets its own handle (the cached one names the freed memory, which a
// daemon that mapped it would keep alive and read). Found on an H200.
TEST_F(DeviceTensorExportTest, ANewAllocationAtAFreedAddressIsExportedAfresh) {
  DeviceTensorExporter exporter;
  void* first = nullptr;
  ASSERT_EQ(cudaMalloc(&first, 1 << 20), cudaSuccess);
  auto a = exporter.Export(first, 64, IpcHandleBytes{});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(cudaFree(first), cudaSuccess);
  void* second = nullptr;
  ASSERT_EQ(cudaMalloc(&second, 1 << 20), cudaSuccess);
  auto b = exporter.Export(second, 64, IpcHandleBytes{});
  ASSERT_TRUE(b.ok()) << b.status();
  if (second == first) {
    EXPECT_NE(b->memory, a->memory) << "a stale handle for a reused address";
  }
  EXPECT_EQ(exporter.cached_allocations(), 1u);
  cudaFree(second);
}

TEST_F(DeviceTensorExportTest, RefusesHostMemory) {
  static float host[16];
  DeviceTensorExporter exporter;
  EXPECT_FALSE(exporter.Export(host, sizeof(host), IpcHandleBytes{}).ok());
}

TEST_F(DeviceTensorExportTest, EventPoolReusesPairs) {
  EventPool pool;
  auto p = pool.Acquire();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NE((*p)->ready_handle, (*p)->done_handle);
  ASSERT_TRUE(RecordReady(**p, nullptr).ok());
  ASSERT_TRUE(WaitDone(**p, nullptr).ok());
  EventPair* raw = p->get();
  pool.Release(std::move(*p));
  EXPECT_EQ(pool.free_pairs(), 1u);
  auto again = pool.Acquire();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), raw);
}

}  // namespace
}  // namespace kolo::client::cuda
