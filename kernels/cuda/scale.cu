#include "kernels/cuda/scale.h"

#include <cuda_runtime.h>

#include "kernels/cuda/device_math.cuh"

namespace kolo::kernels::cuda {
namespace {

constexpr unsigned kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads) ScaleKernel(T* data, uint64_t count, double factor) {
  using E = device::Element<T>;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    data[i] = E::Store(device::ApplyScale(E::Load(data[i]), factor));
  }
}

}  // namespace

int ScaleAsync(DType dtype, void* data, uint64_t count, double factor, void* stream) {
  if (factor == 1.0) return cudaSuccess;
  if (dtype == DType::kBool) return cudaErrorInvalidValue;  // bool takes no scale factor
  if (count == 0) return cudaSuccess;
  if (data == nullptr) return cudaErrorInvalidValue;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const unsigned grid = device::GridFor(count, kThreads);
  return device::DispatchDType(dtype, [&]<typename T>() -> cudaError_t {
    if constexpr (!device::kScalable<T>) {
      return cudaErrorInvalidValue;  // refused above; no scaling kernel exists for it
    } else {
      ScaleKernel<T><<<grid, kThreads, 0, s>>>(static_cast<T*>(data), count, factor);
      return cudaGetLastError();
    }
  });
}

}  // namespace kolo::kernels::cuda
