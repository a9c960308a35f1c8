#include "kernels/cuda/reduce.h"

#include <cuda_runtime.h>

#include <cstring>

#include "kernels/cuda/device_math.cuh"

namespace kolo::kernels::cuda {
namespace {

constexpr unsigned kThreads = 256;

struct Sources {
  const void* ptr[kMaxReduceSources];
};

template <typename T, template <typename> class Op, bool kPre, bool kPost>
__device__ inline T ReduceOne(const Sources& srcs, int k, uint64_t i, double pre, double post) {
  using E = device::Element<T>;
  using C = typename E::Compute;
  C acc = E::Load(static_cast<const T*>(srcs.ptr[0])[i]);
  if constexpr (kPre) acc = device::ApplyScale(acc, pre);
  for (int s = 1; s < k; ++s) {
    C v = E::Load(static_cast<const T*>(srcs.ptr[s])[i]);
    if constexpr (kPre) v = device::ApplyScale(v, pre);
    acc = Op<C>::Apply(acc, v);
  }
  if constexpr (kPost) acc = device::ApplyScale(acc, post);
  return E::Store(acc);
}

// `vectorized`: every pointer is 16-byte aligned, so each thread moves whole
// 16-byte vectors through registers; the tail goes element by element.
template <typename T, template <typename> class Op, bool kPre, bool kPost>
__global__ void __launch_bounds__(kThreads)
    ReduceKernel(Sources srcs, int k, T* dst, uint64_t count, double pre, double post,
                 bool vectorized) {
  using E = device::Element<T>;
  using C = typename E::Compute;
  constexpr unsigned kVec = 16 / sizeof(T);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t done = 0;
  if (vectorized) {
    const uint64_t vectors = count / kVec;
    for (uint64_t v = first; v < vectors; v += stride) {
      C acc[kVec];
      T lanes[kVec];
      uint4 x = static_cast<const uint4*>(srcs.ptr[0])[v];
      memcpy(lanes, &x, sizeof(x));
#pragma unroll
      for (unsigned l = 0; l < kVec; ++l) {
        acc[l] = E::Load(lanes[l]);
        if constexpr (kPre) acc[l] = device::ApplyScale(acc[l], pre);
      }
      for (int s = 1; s < k; ++s) {
        x = static_cast<const uint4*>(srcs.ptr[s])[v];
        memcpy(lanes, &x, sizeof(x));
#pragma unroll
        for (unsigned l = 0; l < kVec; ++l) {
          C val = E::Load(lanes[l]);
          if constexpr (kPre) val = device::ApplyScale(val, pre);
          acc[l] = Op<C>::Apply(acc[l], val);
        }
      }
#pragma unroll
      for (unsigned l = 0; l < kVec; ++l) {
        if constexpr (kPost) acc[l] = device::ApplyScale(acc[l], post);
        lanes[l] = E::Store(acc[l]);
      }
      memcpy(&x, lanes, sizeof(x));
      reinterpret_cast<uint4*>(dst)[v] = x;
    }
    done = vectors * kVec;
  }
  for (uint64_t i = done + first; i < count; i += stride) {
    dst[i] = ReduceOne<T, Op, kPre, kPost>(srcs, k, i, pre, post);
  }
}

template <typename T, template <typename> class Op>
void LaunchWithScales(const Sources& srcs, int k, T* dst, uint64_t count, double pre, double post,
                      bool vectorized, cudaStream_t s) {
  const uint64_t work = vectorized ? count / (16 / sizeof(T)) + 1 : count;
  const unsigned grid = device::GridFor(work, kThreads);
  const bool has_pre = pre != 1.0, has_post = post != 1.0;
  if constexpr (!device::kScalable<T>) {
    // ReduceAsync refused a scale for this type: only the plain kernel.
    ReduceKernel<T, Op, false, false>
        <<<grid, kThreads, 0, s>>>(srcs, k, dst, count, pre, post, vectorized);
  } else if (has_pre && has_post) {
    ReduceKernel<T, Op, true, true>
        <<<grid, kThreads, 0, s>>>(srcs, k, dst, count, pre, post, vectorized);
  } else if (has_pre) {
    ReduceKernel<T, Op, true, false>
        <<<grid, kThreads, 0, s>>>(srcs, k, dst, count, pre, post, vectorized);
  } else if (has_post) {
    ReduceKernel<T, Op, false, true>
        <<<grid, kThreads, 0, s>>>(srcs, k, dst, count, pre, post, vectorized);
  } else {
    ReduceKernel<T, Op, false, false>
        <<<grid, kThreads, 0, s>>>(srcs, k, dst, count, pre, post, vectorized);
  }
}

}  // namespace

int ReduceAsync(DType dtype, ReduceOp op, const void* const* srcs, int num_srcs, void* dst,
                uint64_t count, double prescale, double postscale, void* stream) {
  if (num_srcs < 1 || num_srcs > kMaxReduceSources || srcs == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (dtype == DType::kBool && (prescale != 1.0 || postscale != 1.0)) {
    return cudaErrorInvalidValue;  // bool takes no scale factor
  }
  if (count == 0) return cudaSuccess;
  if (dst == nullptr) return cudaErrorInvalidValue;
  Sources sources{};
  bool vectorized = reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  for (int i = 0; i < num_srcs; ++i) {
    if (srcs[i] == nullptr) return cudaErrorInvalidValue;
    sources.ptr[i] = srcs[i];
    vectorized = vectorized && reinterpret_cast<uintptr_t>(srcs[i]) % 16 == 0;
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  return device::DispatchDType(dtype, [&]<typename T>() -> cudaError_t {
    T* out = static_cast<T*>(dst);
    switch (op) {
      case ReduceOp::kSum:
        LaunchWithScales<T, device::SumOp>(sources, num_srcs, out, count, prescale, postscale,
                                           vectorized, s);
        break;
      case ReduceOp::kProduct:
        LaunchWithScales<T, device::ProductOp>(sources, num_srcs, out, count, prescale, postscale,
                                               vectorized, s);
        break;
      case ReduceOp::kMin:
        LaunchWithScales<T, device::MinOp>(sources, num_srcs, out, count, prescale, postscale,
                                           vectorized, s);
        break;
      case ReduceOp::kMax:
        LaunchWithScales<T, device::MaxOp>(sources, num_srcs, out, count, prescale, postscale,
                                           vectorized, s);
        break;
      default:
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
  });
}

}  // namespace kolo::kernels::cuda
