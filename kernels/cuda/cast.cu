#include "kernels/cuda/cast.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/device_math.cuh"

namespace kolo::kernels::cuda {
namespace {

constexpr unsigned kThreads = 256;

template <typename Half>
__global__ void __launch_bounds__(kThreads)
    NarrowKernel(const float* src, Half* dst, uint64_t count) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = device::Element<Half>::Store(src[i]);
  }
}

template <typename Half>
__global__ void __launch_bounds__(kThreads)
    WidenKernel(const Half* src, float* dst, uint64_t count) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = device::Element<Half>::Load(src[i]);
  }
}

}  // namespace

int NarrowFloat32Async(DType to, const float* src, uint16_t* dst, uint64_t count, void* stream) {
  if (count == 0) return cudaSuccess;
  if (src == nullptr || dst == nullptr) return cudaErrorInvalidValue;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const unsigned grid = device::GridFor(count, kThreads);
  if (to == DType::kFloat16) {
    NarrowKernel<<<grid, kThreads, 0, s>>>(src, reinterpret_cast<__half*>(dst), count);
  } else if (to == DType::kBFloat16) {
    NarrowKernel<<<grid, kThreads, 0, s>>>(src, reinterpret_cast<__nv_bfloat16*>(dst), count);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

int WidenToFloat32Async(DType from, const uint16_t* src, float* dst, uint64_t count, void* stream) {
  if (count == 0) return cudaSuccess;
  if (src == nullptr || dst == nullptr) return cudaErrorInvalidValue;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const unsigned grid = device::GridFor(count, kThreads);
  if (from == DType::kFloat16) {
    WidenKernel<<<grid, kThreads, 0, s>>>(reinterpret_cast<const __half*>(src), dst, count);
  } else if (from == DType::kBFloat16) {
    WidenKernel<<<grid, kThreads, 0, s>>>(reinterpret_cast<const __nv_bfloat16*>(src), dst, count);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace kolo::kernels::cuda
