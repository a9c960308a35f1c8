#include "kernels/cuda/batched_copy.h"

#include <cuda_runtime.h>

#include <cstring>

#include "kernels/cuda/device_math.cuh"

namespace kolo::kernels::cuda {
namespace {

constexpr unsigned kThreads = 256;
// 16-byte vectors per thread per pass: kThreads * kUnroll * 16 bytes is one
// whole chunk (kCopyChunkBytes).
constexpr unsigned kUnroll = 8;
static_assert(kThreads * kUnroll * 16 == kCopyChunkBytes);

template <typename T, bool kScale>
__device__ inline T ScaleOne(T v, double scale) {
  if constexpr (kScale) {
    using E = device::Element<T>;
    return E::Store(device::ApplyScale(E::Load(v), scale));
  } else {
    return v;
  }
}

// Copies `n` elements of one chunk with the whole block.
template <typename T, bool kScale>
__device__ void CopyChunk(const T* src, T* dst, uint64_t n, double scale) {
  constexpr unsigned kVec = 16 / sizeof(T);
  const uint64_t src_mis = reinterpret_cast<uintptr_t>(src) % 16;
  const uint64_t dst_mis = reinterpret_cast<uintptr_t>(dst) % 16;
  uint64_t head = n;  // elements before the first whole vector
  if (src_mis == dst_mis) {
    head = ((16 - src_mis) % 16) / sizeof(T);
    if (head > n) head = n;
  }
  for (uint64_t i = threadIdx.x; i < head; i += blockDim.x) {
    dst[i] = ScaleOne<T, kScale>(src[i], scale);
  }
  if (head == n) return;
  const uint64_t vectors = (n - head) / kVec;
  const uint4* __restrict__ vsrc = reinterpret_cast<const uint4*>(src + head);
  uint4* __restrict__ vdst = reinterpret_cast<uint4*>(dst + head);
  // All loads of a pass are issued before any store, so each thread has
  // kUnroll independent 16-byte loads in flight (a whole chunk in one pass
  // with kThreads threads).
  for (uint64_t first = 0; first < vectors; first += static_cast<uint64_t>(blockDim.x) * kUnroll) {
    uint4 regs[kUnroll];
#pragma unroll
    for (unsigned u = 0; u < kUnroll; ++u) {
      const uint64_t v = first + u * blockDim.x + threadIdx.x;
      if (v < vectors) regs[u] = vsrc[v];
    }
#pragma unroll
    for (unsigned u = 0; u < kUnroll; ++u) {
      const uint64_t v = first + u * blockDim.x + threadIdx.x;
      if (v >= vectors) continue;
      uint4 x = regs[u];
      if constexpr (kScale) {
        T lanes[kVec];
        memcpy(lanes, &x, sizeof(x));
#pragma unroll
        for (unsigned l = 0; l < kVec; ++l) lanes[l] = ScaleOne<T, true>(lanes[l], scale);
        memcpy(&x, lanes, sizeof(x));
      }
      vdst[v] = x;
    }
  }
  for (uint64_t i = head + vectors * kVec + threadIdx.x; i < n; i += blockDim.x) {
    dst[i] = ScaleOne<T, kScale>(src[i], scale);
  }
}

template <typename T, bool kScale>
__global__ void __launch_bounds__(kThreads)
    BatchedCopyKernel(const CopySegment* segments, uint32_t num_segments, uint64_t total_chunks,
                      double scale) {
  constexpr uint64_t kChunkElems = kCopyChunkBytes / sizeof(T);
  __shared__ CopySegment seg;
  for (uint64_t chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
    if (threadIdx.x == 0) {
      // The last segment whose first chunk is <= chunk (empty segments share
      // their first chunk with the next one and so are never chosen).
      uint32_t lo = 0, hi = num_segments - 1;
      while (lo < hi) {
        const uint32_t mid = lo + (hi - lo + 1) / 2;
        if (segments[mid].first_chunk <= chunk) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      seg = segments[lo];
    }
    __syncthreads();
    const uint64_t begin = (chunk - seg.first_chunk) * kChunkElems;
    const uint64_t end = begin + kChunkElems < seg.count ? begin + kChunkElems : seg.count;
    const T* src = reinterpret_cast<const T*>(seg.src) + begin;
    T* dst = reinterpret_cast<T*>(seg.dst) + begin;
    CopyChunk<T, kScale>(src, dst, end - begin, scale);
    __syncthreads();  // `seg` is rewritten by the next iteration
  }
}

}  // namespace

int BatchedCopyAsync(DType dtype, const CopySegment* device_segments, uint32_t num_segments,
                     uint64_t total_chunks, double scale, void* stream) {
  if (dtype == DType::kBool && scale != 1.0) {
    return cudaErrorInvalidValue;  // bool takes no scale factor
  }
  if (num_segments == 0 || total_chunks == 0) return cudaSuccess;
  if (device_segments == nullptr) return cudaErrorInvalidValue;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  uint64_t blocks = total_chunks < 65535 ? total_chunks : 65535;
  return device::DispatchDType(dtype, [&]<typename T>() -> cudaError_t {
    if (scale == 1.0) {
      BatchedCopyKernel<T, false><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
          device_segments, num_segments, total_chunks, scale);
    } else if constexpr (!device::kScalable<T>) {
      return cudaErrorInvalidValue;  // refused above; no scaling kernel exists for it
    } else {
      BatchedCopyKernel<T, true><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
          device_segments, num_segments, total_chunks, scale);
    }
    return cudaGetLastError();
  });
}

}  // namespace kolo::kernels::cuda
