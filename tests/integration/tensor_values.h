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
// `v` as the dtype can hold it (the magnitude for unsigned dtypes; 0 or 1
// for bool).
double Clamp(DType t, double v);
// Element i of the tensor at `base`, as a double. A bool stores a true
// value as a byte that varies with i over 1..255 (so that collectives see
// true bytes other than 1) and loads any byte that is not 0 as 1.
void Store(DType t, void* base, int64_t i, double v);
double Load(DType t, const void* base, int64_t i);
// Whether element i is in the form a reduction writes: for bool, a byte of
// 0 or 1; always true for the other dtypes.
bool Canonical(DType t, const void* base, int64_t i);
// Element i of the allreduce of InputValue over `size` ranks (for bool, sum
// and max are a logical or, product and min a logical and).
double Expected(DType t, ReduceOp op, int size, int64_t i);
// Whether `got` is `want` within the dtype's rounding (exact for integers).
bool Close(DType t, double got, double want);

}  // namespace kolo::testing
