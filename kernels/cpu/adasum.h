// CPU kernels of the Adasum reduction (proto/kolo/abi/types.h, kAdasum): the
// products that decide a pair's coefficients, and the pair's combination.
//
// A pair (a, b) of one tensor combines to
//   (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b,
// a coefficient being 1 where its norm is 0 (so a zero tensor, a joined
// rank's, leaves the other as it is). The products are sums over the whole
// tensor, so an algorithm that holds a tensor in pieces accumulates each
// piece's products and adds them up before it combines.
//
// Floating-point dtypes only (float16, bfloat16, float32, float64); others
// are rejected with INVALID_ARGUMENT. Products accumulate in double, element
// by element in index order; a combination computes in double and rounds
// to the dtype (float32, float64: once; the 16-bit formats through float32,
// to nearest even).
//
// Thread-safety: stateless and reentrant, like kernels/cpu/reduce.h.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "proto/kolo/abi/types.h"

namespace kolo::kernels {

// a.b, |a|^2 and |b|^2 over some elements of one tensor.
struct AdasumProducts {
  double dot = 0;
  double a_norm_sq = 0;
  double b_norm_sq = 0;

  AdasumProducts& operator+=(const AdasumProducts& o) {
    dot += o.dot;
    a_norm_sq += o.a_norm_sq;
    b_norm_sq += o.b_norm_sq;
    return *this;
  }
};

struct AdasumCoefficients {
  double a = 1;
  double b = 1;
};

// The coefficients of a pair whose whole tensors have products `p`.
AdasumCoefficients AdasumCoefficientsOf(const AdasumProducts& p);

// Adds the products of `count` elements of `a` and `b` to `*into`.
absl::Status AdasumAccumulate(DType dtype, const void* a, const void* b, size_t count,
                              AdasumProducts* into);

// dst[i] = c.a * a[i] + c.b * b[i]. `dst` may be `a` or `b` (no other
// overlap); pointers aligned to the element size, non-null unless count is 0.
absl::Status AdasumCombine(DType dtype, const void* a, const void* b, void* dst, size_t count,
                           AdasumCoefficients c);

// Multiplies `count` elements in place by `scale` (prescale, postscale), in
// double, rounded once; a scale of 1 costs nothing.
absl::Status AdasumScale(DType dtype, void* data, size_t count, double scale);

}  // namespace kolo::kernels
