// Elementwise reduction of K device buffers into one: the local step of a
// device allreduce when several ranks share one daemon (and the reference
// the NCCL step is checked against).
//
// Semantics are those of kernels::Reduce (kernels/cpu/reduce.h) with one
// destination: sum, min, max or product (kAverage is refused; fold 1/n into
// postscale), prescale on every input, postscale on the result, sources
// combined left to right, float16/bfloat16 accumulated in float32 and
// rounded once, integer sums and products wrapping, NaN propagating through
// min/max, bool bytes read as true when not zero and written as 0 or 1 (sum
// and max a logical or, product and min a logical and; a scale factor other
// than 1.0 on bool is refused). Results match the CPU kernels bit for bit
// (the sign of a zero from min/max aside).
//
// Built by nvcc where the CUDA toolkit exists; this header needs no CUDA
// header. Thread-safety: stateless.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/kolo/abi/types.h"

namespace kolo::kernels::cuda {

// The most sources one launch combines (they travel as a kernel argument).
inline constexpr int kMaxReduceSources = 32;

// Launches dst[i] = post * (pre*srcs[0][i] op pre*srcs[1][i] op ...) for
// i < count on `stream` (a cudaStream_t). `srcs` is a host array of
// `num_srcs` (1..kMaxReduceSources) device pointers, read at launch time.
// `dst` may be exactly one of the sources; other overlaps are not allowed.
// Every pointer must be aligned to its element size. Returns the launch's
// cudaError_t as an int (0 on success; cudaErrorInvalidValue for a bad
// argument).
int ReduceAsync(DType dtype, ReduceOp op, const void* const* srcs, int num_srcs, void* dst,
                uint64_t count, double prescale, double postscale, void* stream);

}  // namespace kolo::kernels::cuda
