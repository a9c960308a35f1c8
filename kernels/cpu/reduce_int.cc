// Integer and bool reduction kernels: portable C++ over cache-sized blocks.
//
// Each block (kBlockBytes of output) is accumulated in a local buffer from
// every source in turn, then copied to every destination. The inner loops are
// simple enough for the compiler to vectorize, all sources of a block are read
// before any destination of it is written (so in-place is safe), and the
// buffer stays in L1 while it is copied out several times.
//
// Sum and product wrap: they are done in the unsigned type of the same width,
// whose conversion back is modular (two's complement) by definition. Scaling
// goes through double, truncates toward zero and saturates (NaN becomes 0).
//
// bool reads a byte that is not zero as true and writes 0 or 1: sum and max
// are a logical or, product and min a logical and (it is never scaled).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/reduce_internal.h"
#include "proto/kolo/abi/types.h"

namespace kolo::kernels::internal {
namespace {

constexpr size_t kBlockBytes = 8192;

// Reduce() validates dtype and op, so reaching this is a bug: stop loudly.
[[noreturn]] void Unreachable(const char* what, const ReduceArgs& args) {
  std::fprintf(stderr, "kolo::kernels::internal reduce: unexpected %s (dtype %u, op %u)\n", what,
               static_cast<unsigned>(args.dtype), static_cast<unsigned>(args.op));
  std::abort();
}

template <typename T>
T ScaleSaturate(T value, double scale) {
  const double scaled = std::trunc(static_cast<double>(value) * scale);
  if (std::isnan(scaled)) return 0;
  // Both bounds are powers of two (or zero) and so exact in double; the upper
  // one is exclusive because max() itself may not be representable (int64).
  constexpr double kLow = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double kHighExclusive =
      2.0 * static_cast<double>(std::numeric_limits<T>::max() / 2 + 1);
  if (scaled < kLow) return std::numeric_limits<T>::min();
  if (scaled >= kHighExclusive) return std::numeric_limits<T>::max();
  return static_cast<T>(scaled);
}

template <typename T>
struct Sum {
  static T Apply(T a, T b) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
};

template <typename T>
struct Product {
  static T Apply(T a, T b) {
    using U = std::make_unsigned_t<T>;
    // Narrow types promote to int; widen to at least unsigned int first so
    // the multiplication itself cannot overflow a signed type.
    using Wide = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<U>(static_cast<Wide>(static_cast<U>(a)) *
                                         static_cast<Wide>(static_cast<U>(b))));
  }
};

template <typename T>
struct Min {
  static T Apply(T a, T b) { return b < a ? b : a; }
};

template <typename T>
struct Max {
  static T Apply(T a, T b) { return a < b ? b : a; }
};

template <typename T, class Op, bool kPre, bool kPost>
void ReduceBlocks(const ReduceArgs& args) {
  constexpr size_t kBlock = kBlockBytes / sizeof(T);
  T acc[kBlock];
  T scaled[kBlock];
  for (size_t base = 0; base < args.count; base += kBlock) {
    const size_t n = std::min(kBlock, args.count - base);
    const T* src0 = static_cast<const T*>(args.srcs[0]) + base;
    if constexpr (kPre) {
      for (size_t j = 0; j < n; ++j) acc[j] = ScaleSaturate(src0[j], args.prescale);
    } else {
      std::memcpy(acc, src0, n * sizeof(T));
    }
    for (size_t k = 1; k < args.num_srcs; ++k) {
      const T* src = static_cast<const T*>(args.srcs[k]) + base;
      if constexpr (kPre) {
        for (size_t j = 0; j < n; ++j) scaled[j] = ScaleSaturate(src[j], args.prescale);
        src = scaled;
      }
      for (size_t j = 0; j < n; ++j) acc[j] = Op::Apply(acc[j], src[j]);
    }
    if constexpr (kPost) {
      for (size_t j = 0; j < n; ++j) acc[j] = ScaleSaturate(acc[j], args.postscale);
    }
    for (size_t k = 0; k < args.num_dsts; ++k) {
      std::memcpy(static_cast<T*>(args.dsts[k]) + base, acc, n * sizeof(T));
    }
  }
}

template <typename T, class Op>
void ReduceWithScales(const ReduceArgs& args) {
  const bool pre = args.prescale != 1.0;
  const bool post = args.postscale != 1.0;
  if (pre && post) return ReduceBlocks<T, Op, true, true>(args);
  if (pre) return ReduceBlocks<T, Op, true, false>(args);
  if (post) return ReduceBlocks<T, Op, false, true>(args);
  return ReduceBlocks<T, Op, false, false>(args);
}

template <typename T>
void ReduceWithType(const ReduceArgs& args) {
  switch (args.op) {
    case ReduceOp::kSum:
      return ReduceWithScales<T, Sum<T>>(args);
    case ReduceOp::kProduct:
      return ReduceWithScales<T, Product<T>>(args);
    case ReduceOp::kMin:
      return ReduceWithScales<T, Min<T>>(args);
    case ReduceOp::kMax:
      return ReduceWithScales<T, Max<T>>(args);
    case ReduceOp::kAverage:
    case ReduceOp::kAdasum:
      break;
  }
  Unreachable("op", args);
}

// Logical or (kOr) or and of bool bytes into 0/1 bytes.
template <bool kOr>
void ReduceBoolBlocks(const ReduceArgs& args) {
  uint8_t acc[kBlockBytes];
  for (size_t base = 0; base < args.count; base += kBlockBytes) {
    const size_t n = std::min(kBlockBytes, args.count - base);
    const uint8_t* src0 = static_cast<const uint8_t*>(args.srcs[0]) + base;
    for (size_t j = 0; j < n; ++j) acc[j] = src0[j] != 0;
    for (size_t k = 1; k < args.num_srcs; ++k) {
      const uint8_t* src = static_cast<const uint8_t*>(args.srcs[k]) + base;
      if constexpr (kOr) {
        for (size_t j = 0; j < n; ++j) acc[j] |= static_cast<uint8_t>(src[j] != 0);
      } else {
        for (size_t j = 0; j < n; ++j) acc[j] &= static_cast<uint8_t>(src[j] != 0);
      }
    }
    for (size_t k = 0; k < args.num_dsts; ++k) {
      std::memcpy(static_cast<uint8_t*>(args.dsts[k]) + base, acc, n);
    }
  }
}

}  // namespace

void ReduceBool(const ReduceArgs& args) {
  if (args.dtype != DType::kBool) Unreachable("dtype", args);
  if (args.prescale != 1.0 || args.postscale != 1.0) Unreachable("bool scale", args);
  switch (args.op) {
    case ReduceOp::kSum:
    case ReduceOp::kMax:
      return ReduceBoolBlocks<true>(args);
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
      return ReduceBoolBlocks<false>(args);
    case ReduceOp::kAverage:
    case ReduceOp::kAdasum:
      break;
  }
  Unreachable("op", args);
}

void ReduceInteger(const ReduceArgs& args) {
  switch (args.dtype) {
    case DType::kUint8:
      return ReduceWithType<uint8_t>(args);
    case DType::kInt8:
      return ReduceWithType<int8_t>(args);
    case DType::kInt16:
      return ReduceWithType<int16_t>(args);
    case DType::kUint16:
      return ReduceWithType<uint16_t>(args);
    case DType::kInt32:
      return ReduceWithType<int32_t>(args);
    case DType::kInt64:
      return ReduceWithType<int64_t>(args);
    default:
      break;
  }
  Unreachable("dtype", args);
}

}  // namespace kolo::kernels::internal
