// Element arithmetic shared by the Kolo CUDA kernels (device code; included
// by .cu files only). It follows the contract of the CPU reference kernels in
// kernels/cpu/reduce.h so that the two agree bit for bit:
//   - float16/bfloat16 load as float32, compute there and round to nearest
//     even once on store;
//   - float32 scales by (float)scale, float64 by the double itself;
//   - every product and sum is rounded on its own: the _rn intrinsics are
//     never contracted into a fused multiply-add, whatever nvcc's -fmad says;
//   - integers: sum and product wrap (computed unsigned); scaling goes
//     through double, truncates toward zero and saturates (NaN gives 0);
//   - bool (stored as Bool8) loads a byte that is not zero as true and
//     stores 0 or 1; sum and max are a logical or, product and min a
//     logical and; it is never scaled (the launchers refuse a scale);
//   - min/max give NaN when either operand is NaN.
//
// Thread-safety: pure device functions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cuda/std/limits>
#include <cuda/std/type_traits>

#include "proto/kolo/abi/types.h"

namespace kolo::kernels::cuda::device {

// The storage of a Kolo bool: one byte, true when it is not zero (a type of
// its own, so that dispatch can tell it from uint8).
struct Bool8 {
  uint8_t value;
};
static_assert(sizeof(Bool8) == 1 && alignof(Bool8) == 1);

// How an element type is stored and in which type it is computed.
template <typename T>
struct Element {
  using Compute = T;
  __device__ static Compute Load(T v) { return v; }
  __device__ static T Store(Compute v) { return v; }
};
template <>
struct Element<__half> {
  using Compute = float;
  __device__ static float Load(__half v) { return __half2float(v); }
  __device__ static __half Store(float v) { return __float2half_rn(v); }
};
template <>
struct Element<__nv_bfloat16> {
  using Compute = float;
  __device__ static float Load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 Store(float v) { return __float2bfloat16_rn(v); }
};
template <>
struct Element<Bool8> {
  using Compute = bool;
  __device__ static bool Load(Bool8 v) { return v.value != 0; }
  __device__ static Bool8 Store(bool v) { return Bool8{static_cast<uint8_t>(v ? 1 : 0)}; }
};

// Whether elements of storage type T may be scaled (not bool).
template <typename T>
inline constexpr bool kScalable = !::cuda::std::is_same_v<T, Bool8>;

template <typename C>
__device__ inline C ApplyScale(C v, double scale) {
  static_assert(!::cuda::std::is_same_v<C, bool>, "bool takes no scale factor");
  if constexpr (::cuda::std::is_same_v<C, float>) {
    return __fmul_rn(v, static_cast<float>(scale));
  } else if constexpr (::cuda::std::is_same_v<C, double>) {
    return __dmul_rn(v, scale);
  } else {
    using Limits = ::cuda::std::numeric_limits<C>;
    const double scaled = trunc(__dmul_rn(static_cast<double>(v), scale));
    if (isnan(scaled)) return 0;
    // Both bounds are powers of two (or zero) and so exact in double; the
    // upper one is exclusive because max() itself may not be (int64).
    constexpr double kLow = static_cast<double>(Limits::min());
    constexpr double kHighExclusive = 2.0 * static_cast<double>(Limits::max() / 2 + 1);
    if (scaled < kLow) return Limits::min();
    if (scaled >= kHighExclusive) return Limits::max();
    return static_cast<C>(scaled);
  }
}

// The four combining operators, on compute types.
template <typename C>
struct SumOp {
  __device__ static C Apply(C a, C b) {
    if constexpr (::cuda::std::is_same_v<C, bool>) {
      return a || b;
    } else if constexpr (::cuda::std::is_same_v<C, float>) {
      return __fadd_rn(a, b);
    } else if constexpr (::cuda::std::is_same_v<C, double>) {
      return __dadd_rn(a, b);
    } else {
      using U = ::cuda::std::make_unsigned_t<C>;
      return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    }
  }
};
template <typename C>
struct ProductOp {
  __device__ static C Apply(C a, C b) {
    if constexpr (::cuda::std::is_same_v<C, bool>) {
      return a && b;
    } else if constexpr (::cuda::std::is_same_v<C, float>) {
      return __fmul_rn(a, b);
    } else if constexpr (::cuda::std::is_same_v<C, double>) {
      return __dmul_rn(a, b);
    } else {
      using U = ::cuda::std::make_unsigned_t<C>;
      // Narrow types promote to int: widen to unsigned first so that the
      // multiplication itself cannot overflow a signed type.
      using Wide = ::cuda::std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
      return static_cast<C>(static_cast<U>(static_cast<Wide>(static_cast<U>(a)) *
                                           static_cast<Wide>(static_cast<U>(b))));
    }
  }
};
template <typename C>
struct MinOp {
  __device__ static C Apply(C a, C b) {
    if constexpr (::cuda::std::is_floating_point_v<C>) {
      if (isnan(a) || isnan(b)) return a + b;
    }
    return b < a ? b : a;
  }
};
template <typename C>
struct MaxOp {
  __device__ static C Apply(C a, C b) {
    if constexpr (::cuda::std::is_floating_point_v<C>) {
      if (isnan(a) || isnan(b)) return a + b;
    }
    return a < b ? b : a;
  }
};

// Grid size for a grid-stride loop over `work` items of `threads` each: at
// most a few waves of a large GPU, at least one block.
inline unsigned GridFor(uint64_t work, unsigned threads) {
  constexpr uint64_t kMaxBlocks = 8192;
  uint64_t blocks = (work + threads - 1) / threads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return blocks == 0 ? 1u : static_cast<unsigned>(blocks);
}

// Calls `f.template operator()<T>()` with T the storage type of `dtype`;
// returns cudaErrorInvalidValue for a dtype outside the enum.
template <class F>
cudaError_t DispatchDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kUint8:
      return f.template operator()<uint8_t>();
    case DType::kInt8:
      return f.template operator()<int8_t>();
    case DType::kInt16:
      return f.template operator()<int16_t>();
    case DType::kUint16:
      return f.template operator()<uint16_t>();
    case DType::kInt32:
      return f.template operator()<int32_t>();
    case DType::kInt64:
      return f.template operator()<int64_t>();
    case DType::kFloat16:
      return f.template operator()<__half>();
    case DType::kBFloat16:
      return f.template operator()<__nv_bfloat16>();
    case DType::kFloat32:
      return f.template operator()<float>();
    case DType::kFloat64:
      return f.template operator()<double>();
    case DType::kBool:
      return f.template operator()<Bool8>();
  }
  return cudaErrorInvalidValue;
}

}  // namespace kolo::kernels::cuda::device
