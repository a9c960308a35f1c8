// The reduction kernels' tests' reference: a test-side model of each dtype
// (storage type, the type the reference computes in, conversions written
// from the formats' definitions, not taken from the library), the reference
// reduction, and helpers that run a check on every SIMD target.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "kernels/cpu/half.h"
#include "proto/kolo/abi/types.h"

#include "kernels/cpu/reduce.h"
#include "kernels/cpu/simd_targets_testing.h"

namespace kolo::kernels::reduce_testing {

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------------------
// Test-side model of each dtype: storage type S, the type C the reference
// computes in, and reference conversions written here from the formats'
// definitions (not taken from the library).

inline double RefHalfValue(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// Rounds to nearest even in a format with `mantissa_bits` stored bits,
// smallest normal exponent `min_exponent` and largest finite value `max`.
inline double RefNarrow(double x, int mantissa_bits, int min_exponent, double max) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const double a = std::fabs(x);
  const int exponent = std::max(std::ilogb(a), min_exponent);
  const double ulp = std::ldexp(1.0, exponent - mantissa_bits);
  double r = std::nearbyint(a / ulp) * ulp;
  if (r > max) r = INFINITY;
  return std::copysign(r, x);
}

struct Float32Model {
  static constexpr DType kDType = DType::kFloat32;
  using S = float;
  using C = float;
  static C Decode(S s) { return s; }
  static C Narrow(C c) { return c; }
  static S Encode(float f) { return f; }
};

struct Float64Model {
  static constexpr DType kDType = DType::kFloat64;
  using S = double;
  using C = double;
  static C Decode(S s) { return s; }
  static C Narrow(C c) { return c; }
  static S Encode(float f) { return f; }
};

struct HalfModel {
  static constexpr DType kDType = DType::kFloat16;
  using S = uint16_t;
  using C = float;
  static C Decode(S s) { return static_cast<float>(RefHalfValue(s)); }
  static C Narrow(C c) { return static_cast<float>(RefNarrow(c, 10, -14, 65504.0)); }
  // Only used for inputs that are exact in the format.
  static S Encode(float f) { return FloatToHalf(f); }
};

struct BFloat16Model {
  static constexpr DType kDType = DType::kBFloat16;
  using S = uint16_t;
  using C = float;
  static C Decode(S s) { return std::bit_cast<float>(static_cast<uint32_t>(s) << 16); }
  static C Narrow(C c) { return static_cast<float>(RefNarrow(c, 7, -126, std::ldexp(255.0, 120))); }
  static S Encode(float f) { return FloatToBFloat16(f); }
};

template <typename T, DType kD>
struct IntModel {
  static constexpr DType kDType = kD;
  using S = T;
  using C = T;
  static C Decode(S s) { return s; }
  static C Narrow(C c) { return c; }
};

using Uint8Model = IntModel<uint8_t, DType::kUint8>;
using Int8Model = IntModel<int8_t, DType::kInt8>;
using Int16Model = IntModel<int16_t, DType::kInt16>;
using Uint16Model = IntModel<uint16_t, DType::kUint16>;
using Int32Model = IntModel<int32_t, DType::kInt32>;
using Int64Model = IntModel<int64_t, DType::kInt64>;

// bool: one byte, true when it is not zero. The reference computes on C++
// bool, where the integer reference's sum and product (of 0/1 values, never
// more than 8 at once) and std::min/max are exactly or, and, and, or.
struct BoolModel {
  static constexpr DType kDType = DType::kBool;
  using S = uint8_t;
  using C = bool;
  static C Decode(S s) { return s != 0; }
  static C Narrow(C c) { return c; }
};

// Scaling as the contract states it: floats multiply in C; integers go
// through double, truncate, and clamp.
template <typename C>
C RefScale(C value, double scale) {
  if constexpr (std::is_floating_point_v<C>) {
    return value * static_cast<C>(scale);
  } else {
    const double x = std::trunc(static_cast<double>(value) * scale);
    if (std::isnan(x)) return 0;
    if (x <= static_cast<double>(std::numeric_limits<C>::min())) {
      return std::numeric_limits<C>::min();
    }
    if (x >= static_cast<double>(std::numeric_limits<C>::max())) {
      return std::numeric_limits<C>::max();
    }
    return static_cast<C>(x);
  }
}

template <typename C>
C RefCombine(ReduceOp op, C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if ((op == ReduceOp::kMin || op == ReduceOp::kMax) && (std::isnan(a) || std::isnan(b))) {
      return std::numeric_limits<C>::quiet_NaN();
    }
    switch (op) {
      case ReduceOp::kSum:
        return a + b;
      case ReduceOp::kProduct:
        return a * b;
      case ReduceOp::kMin:
        return std::min(a, b);
      case ReduceOp::kMax:
        return std::max(a, b);
      default:
        break;
    }
  } else {
    // Wrap by working modulo 2^64 and truncating (modular since C++20).
    const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
    switch (op) {
      case ReduceOp::kSum:
        return static_cast<C>(ua + ub);
      case ReduceOp::kProduct:
        return static_cast<C>(ua * ub);
      case ReduceOp::kMin:
        return std::min(a, b);
      case ReduceOp::kMax:
        return std::max(a, b);
      default:
        break;
    }
  }
  ADD_FAILURE() << "bad op";
  return a;
}

template <class M>
typename M::C RefReduceElement(ReduceOp op, const std::vector<std::vector<typename M::S>>& srcs,
                               size_t i, double pre, double post) {
  using C = typename M::C;
  auto input = [&](size_t k) {
    const C c = M::Decode(srcs[k][i]);
    return pre == 1.0 ? c : RefScale<C>(c, pre);
  };
  C acc = input(0);
  for (size_t k = 1; k < srcs.size(); ++k) acc = RefCombine<C>(op, acc, input(k));
  if (post != 1.0) acc = RefScale<C>(acc, post);
  return M::Narrow(acc);
}

template <typename C>
bool SameResult(C got, C want) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  }
  return got == want;
}

// Reduces two arrays of float values stored as dtype M, returns decoded out.
template <class M>
std::vector<float> ReduceTwo(ReduceOp op, const std::vector<float>& a, const std::vector<float>& b,
                             double pre = 1.0, double post = 1.0) {
  std::vector<typename M::S> sa, sb, out(a.size());
  for (float x : a) sa.push_back(M::Encode(x));
  for (float x : b) sb.push_back(M::Encode(x));
  const void* srcs[] = {sa.data(), sb.data()};
  void* dsts[] = {out.data()};
  EXPECT_TRUE(Reduce(M::kDType, op, srcs, dsts, a.size(), pre, post).ok());
  std::vector<float> result;
  for (auto s : out) result.push_back(static_cast<float>(M::Decode(s)));
  return result;
}

// Repeats `x` to 19 elements so that vector body and tail both see it.
inline std::vector<float> Fill(float x) { return std::vector<float>(19, x); }

}  // namespace kolo::kernels::reduce_testing
