// Kernels behind Reduce() in reduce.h, split by element family. Reduce()
// validates every argument first; these entry points trust them.
//
// Thread-safety: pure functions over caller-owned memory; reentrant.
#pragma once

#include <cstddef>

#include "proto/kolo/abi/types.h"

namespace kolo::kernels::internal {

// A validated call: dtype and op are in range (op is never kAverage),
// num_srcs >= 1, num_dsts >= 1, count >= 1, every pointer is non-null and
// aligned to its element, and a dst either is exactly a src or overlaps none.
struct ReduceArgs {
  DType dtype;
  ReduceOp op;
  const void* const* srcs;
  size_t num_srcs;
  void* const* dsts;
  size_t num_dsts;
  size_t count;
  double prescale;
  double postscale;
};

// float16, bfloat16, float32, float64: SIMD, dispatched on the running CPU.
void ReduceFloat(const ReduceArgs& args);

// uint8, int8, int16, uint16, int32, int64: portable C++.
void ReduceInteger(const ReduceArgs& args);

// bool: portable C++. Both scales are 1.0 (Reduce() rejects any other);
// every output byte is 0 or 1, also with a single source.
void ReduceBool(const ReduceArgs& args);

}  // namespace kolo::kernels::internal
