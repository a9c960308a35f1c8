// float32 <-> float16/bfloat16 casts on the device: the compression step of
// a float32 allreduce whose data travels between nodes as 16 bits.
//
// Narrowing rounds to nearest even and overflows to infinity, as
// kernels::FloatToHalf/FloatToBFloat16 (kernels/cpu/half.h) do; finite
// results match those bit for bit. A NaN stays a NaN (its payload may
// differ from the CPU conversion's).
//
// Built by nvcc where the CUDA toolkit exists; this header needs no CUDA
// header. Thread-safety: stateless.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/kolo/abi/types.h"

namespace kolo::kernels::cuda {

// Launches dst[i] = narrow(src[i]) for i < count on `stream` (a
// cudaStream_t); `to` is kFloat16 or kBFloat16, `dst` holds the 16-bit
// patterns. `src` and `dst` must not overlap. Returns the launch's
// cudaError_t as an int.
int NarrowFloat32Async(DType to, const float* src, uint16_t* dst, uint64_t count, void* stream);

// Launches dst[i] = widen(src[i]) (exact) for i < count; `from` is kFloat16
// or kBFloat16.
int WidenToFloat32Async(DType from, const uint16_t* src, float* dst, uint64_t count, void* stream);

}  // namespace kolo::kernels::cuda
