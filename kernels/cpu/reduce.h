// CPU reduction kernels: the elementwise arithmetic of allreduce and of
// broadcast-with-scaling, for every element type of the ABI.
//
// The kernels are single-threaded and run near memory bandwidth on one core:
// each source is read once and each destination written once, in one pass.
// Splitting a large array across threads is the caller's job; disjoint
// element ranges may be reduced concurrently.
//
// Thread-safety: stateless and reentrant; concurrent calls are safe as long as
// no call writes memory another call reads or writes.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/kolo/abi/types.h"

namespace kolo::kernels {

// Elementwise reduction of `srcs.size()` (>= 1) arrays of `count` elements of
// `dtype`, written to every array in `dsts` (>= 1).
//
// `op` is kSum, kMin, kMax or kProduct. kAverage is rejected with
// INVALID_ARGUMENT: callers fold 1/n into `postscale`.
//
// Every input element is multiplied by `prescale` before the reduction and
// the result by `postscale` after it; a scale of exactly 1.0 is skipped and
// costs nothing.
//   - float32 computes in float32 (scales rounded to float), float64 in
//     double; each product and sum is rounded on its own (never fused).
//   - float16/bfloat16 widen to float32, compute there and round once at the
//     end to nearest even (overflow gives infinity).
//   - Integers: sum and product wrap (two's complement). Scaling is computed
//     in double, rounded toward zero, then saturated to the type's range (a
//     NaN product gives 0).
//   - bool: an input byte that is not zero is true; every output byte is 0
//     or 1, even with one source. kSum and kMax are a logical or, kProduct
//     and kMin a logical and. Any scale other than 1.0 is rejected with
//     INVALID_ARGUMENT.
// Sources are combined left to right (src0 op src1 op ...), so the result
// does not depend on the CPU's vector width. Min/max propagate NaN: if any
// input is NaN, the result is NaN. min(-0, +0) may be either zero.
//
// Memory: each pointer must be non-null (unless count == 0) and aligned to
// its element size. A dst may be exactly the same pointer as a src (in
// place); any other overlap between a dst and a src or another dst is
// rejected with INVALID_ARGUMENT, as are empty spans and out-of-range enums.
// On error nothing has been written.
absl::Status Reduce(DType dtype, ReduceOp op, absl::Span<const void* const> srcs,
                    absl::Span<void* const> dsts, size_t count, double prescale = 1.0,
                    double postscale = 1.0);

// dst[i] = src[i] * scale for every dst: broadcast or copy with a postscale.
// Scaling follows Reduce() (it is a one-source reduction with postscale
// `scale`); a scale of 1.0 is a plain memcpy to each dst, bit for bit, for
// every dtype (bool bytes are copied as they are; bool rejects any other
// scale with INVALID_ARGUMENT). A dst
// may be `src` itself; other overlaps and the argument rules are as for
// Reduce().
absl::Status ScaleCopy(DType dtype, const void* src, absl::Span<void* const> dsts, size_t count,
                       double scale);

}  // namespace kolo::kernels
