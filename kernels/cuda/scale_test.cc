// Runs the scale kernel on a real GPU (tagged "gpu": skipped where none is).
#include "kernels/cuda/scale.h"

#include <cuda_runtime.h>

#include <vector>

#include "gtest/gtest.h"

namespace kolo::kernels::cuda {
namespace {

TEST(ScaleTest, ScalesEveryElementOnTheDevice) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  ASSERT_GT(devices, 0);
  const size_t n = (1 << 20) + 3;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(ScaleFloat32Async(dev, n, 0.5f, nullptr), 0);
  ASSERT_EQ(cudaMemcpy(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(dev);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(host[i], static_cast<float>(i % 1000) * 0.5f) << i;
}

}  // namespace
}  // namespace kolo::kernels::cuda
