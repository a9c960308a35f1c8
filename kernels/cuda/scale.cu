#include <cuda_runtime.h>

#include "kernels/cuda/scale.h"

namespace kolo::kernels::cuda {
namespace {

__global__ void ScaleKernel(float* data, size_t count, float factor) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] *= factor;
  }
}

}  // namespace

int ScaleFloat32Async(float* data, size_t count, float factor, void* stream) {
  if (count == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  size_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks > 65535) blocks = 65535;
  ScaleKernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                static_cast<cudaStream_t>(stream)>>>(data, count, factor);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kolo::kernels::cuda
