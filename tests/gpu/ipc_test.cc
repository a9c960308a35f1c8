// Device tensors across processes (tag "gpu"): a child process exports a
// tensor at an interior offset of its allocation with the SDK helpers; the
// parent maps it through IpcMappingCache as kolod does, waits on the
// child's event on its own stream, checks the data, writes a result back and
// records the output event; the child waits on that event and checks.
//
// The fork happens before either process touches CUDA (a CUDA context does
// not survive fork).
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "client/cuda/device_tensor_export.h"
#include "common/cuda/cuda_resources.h"
#include "common/cuda/ipc_mapping.h"
#include "gtest/gtest.h"

namespace kolo {
namespace {

using cuda::DeviceTensorRef;

constexpr size_t kCount = 100003;
constexpr uint64_t kOffset = 4096 + 12;  // interior, element-aligned

bool ReadAll(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteAll(int fd, const void* p, size_t n) {
  return write(fd, p, n) == static_cast<ssize_t>(n);
}

// The exporting rank. Returns its exit code: 0 when the parent's result came
// back, otherwise where it failed.
int Child(int to_parent, int from_parent) {
  if (cudaSetDevice(0) != cudaSuccess) return 10;
  uint8_t* base = nullptr;
  if (cudaMalloc(&base, kOffset + kCount * 4 + 100) != cudaSuccess) return 11;
  std::vector<float> v(kCount);
  for (size_t i = 0; i < kCount; ++i) v[i] = static_cast<float>(i);
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return 12;
  if (cudaMemcpyAsync(base + kOffset, v.data(), kCount * 4, cudaMemcpyHostToDevice, s) !=
      cudaSuccess) {
    return 13;
  }
  client::cuda::EventPool pool;
  auto pair = pool.Acquire();
  if (!pair.ok()) return 14;
  if (!client::cuda::RecordReady(**pair, s).ok()) return 15;
  client::cuda::DeviceTensorExporter exporter;
  auto in = exporter.Export(base + kOffset, kCount * 4, (*pair)->ready_handle);
  if (!in.ok()) return 16;
  DeviceTensorRef out = *in;
  out.event = (*pair)->done_handle;
  if (!WriteAll(to_parent, &*in, sizeof(*in)) || !WriteAll(to_parent, &out, sizeof(out))) {
    return 17;
  }
  char go = 0;
  if (!ReadAll(from_parent, &go, 1)) return 18;
  if (!client::cuda::WaitDone(**pair, s).ok()) return 19;
  if (cudaMemcpyAsync(v.data(), base + kOffset, kCount * 4, cudaMemcpyDeviceToHost, s) !=
      cudaSuccess) {
    return 20;
  }
  if (cudaStreamSynchronize(s) != cudaSuccess) return 21;
  for (size_t i = 0; i < kCount; ++i) {
    if (v[i] != 2.0f * static_cast<float>(i)) return 22;
  }
  return 0;
}

TEST(IpcTest, DaemonMapsWaitsAndWritesBack) {
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    _exit(Child(up[1], down[0]));
  }
  close(up[1]);
  close(down[0]);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    close(down[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    GTEST_SKIP() << "no CUDA device";
  }
  auto device = cuda::CudaDevice::Open(0);
  ASSERT_TRUE(device.ok()) << device.status();
  DeviceTensorRef in, out;
  ASSERT_TRUE(ReadAll(up[0], &in, sizeof(in)) && ReadAll(up[0], &out, sizeof(out)));
  EXPECT_EQ(in.offset, kOffset);

  cuda::IpcMappingCache cache;
  auto mapping = cache.Memory(in.memory);
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  EXPECT_GE((*mapping)->size(), kOffset + kCount * 4);
  EXPECT_FALSE((*mapping)->Resolve(in.offset, (*mapping)->size(), 4).ok());
  auto data = (*mapping)->Resolve(in.offset, in.bytes, 4);
  ASSERT_TRUE(data.ok()) << data.status();
  auto again = cache.Memory(out.memory);  // same allocation: same mapping
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), mapping->get());
  auto ready = cache.Event(in.event);
  auto done = cache.Event(out.event);
  ASSERT_TRUE(ready.ok() && done.ok()) << ready.status() << done.status();

  auto stream = cuda::CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  ASSERT_EQ(cudaStreamWaitEvent(stream->get(), (*ready)->get(), 0), cudaSuccess);
  std::vector<float> v(kCount);
  ASSERT_EQ(cudaMemcpyAsync(v.data(), *data, kCount * 4, cudaMemcpyDeviceToHost, stream->get()),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(v[i], static_cast<float>(i)) << i;
  for (float& x : v) x *= 2.0f;
  ASSERT_EQ(cudaMemcpyAsync(*data, v.data(), kCount * 4, cudaMemcpyHostToDevice, stream->get()),
            cudaSuccess);
  ASSERT_TRUE((*done)->Record(stream->get()).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
  const char go = 1;
  ASSERT_TRUE(WriteAll(down[1], &go, 1));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "the exporting process failed at step " << WEXITSTATUS(status);
  close(up[0]);
  close(down[1]);
  mapping->reset();
  again->reset();
  cache.Clear();
}

}  // namespace
}  // namespace kolo
