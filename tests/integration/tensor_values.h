// The values rank programs put into tensors and expect back: small integers,
// so sums, products, minima and maxima are exact in every dtype, and typed
// element access for every dtype Kolo carries.
//
// Thread-safety: stateless functions; safe from any thread.
#pragma once

#include <cstdint>

#include "kolo/kolo.h"

namespace kolo::testing {

// Element i of rank r's allreduce input for `op`.
double InputValue(ReduceOp op, int rank, int64_t i);
// `v` as the dtype can hold it (the magnitude for unsigned dtypes).
double Clamp(DType t, double v);
// Element i of the tensor at `base`, as a double.
void Store(DType t, void* base, int64_t i, double v);
double Load(DType t, const void* base, int64_t i);
// Element i of the allreduce of InputValue over `size` ranks.
double Expected(DType t, ReduceOp op, int size, int64_t i);
// Whether `got` is `want` within the dtype's rounding (exact for integers).
bool Close(DType t, double got, double want);

}  // namespace kolo::testing
