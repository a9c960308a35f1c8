// In-place scaling of a device array of any Kolo element type: a postscale
// applied where no copy is needed (a fused buffer that stays in place).
//
// Scaling follows kernels::ScaleCopy (kernels/cpu/reduce.h) bit for bit:
// float32 by (float)factor, float64 by the double, float16/bfloat16 through
// float32 with one rounding, integers through double, truncated and
// saturated. A factor of exactly 1.0 launches nothing; bool takes no other
// factor (refused with cudaErrorInvalidValue, as ScaleCopy refuses it).
//
// Built by nvcc where the CUDA toolkit exists; this header needs no CUDA
// header. Thread-safety: stateless.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/kolo/abi/types.h"

namespace kolo::kernels::cuda {

// Launches data[i] *= factor for i < count on `stream` (a cudaStream_t;
// nullptr is the legacy default stream). Returns the launch's cudaError_t as
// an int (0 on success).
int ScaleAsync(DType dtype, void* data, uint64_t count, double factor, void* stream);

}  // namespace kolo::kernels::cuda
