// Floating-point reduction kernels, compiled once per SIMD target and chosen
// at run time.
//
// Shape of the loop: for each group of four vectors, load the group from
// every source (scaling it if asked), combine in registers, scale, and store
// the result to every destination. So each source byte is read once and each
// destination byte written once, in one pass, and the working set at any
// moment is a few cache lines per stream: no block of the output is ever
// re-read from memory to serve a second destination. Because a group is read
// from all sources before it is written anywhere, a destination that is
// exactly a source (in place) is safe.
//
// float16/bfloat16 are widened to float32 on load, combined and scaled in
// float32, and narrowed once on store. float32 scales by (float)scale, float64
// by the double itself. The combination order is fixed (src0 op src1 op ...),
// so results do not depend on the target.

#include <cstddef>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/reduce_float.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/reduce_internal.h"
#include "kernels/cpu/simd_convert-inl.h"
#include "proto/kolo/abi/types.h"

HWY_BEFORE_NAMESPACE();
namespace kolo::kernels::HWY_NAMESPACE {
namespace {

using internal::ReduceArgs;

// Element formats: how lanes of the compute type D are loaded from memory
// holding `Elem`s, narrowed to the stored form (once, however many
// destinations), and stored.
struct Float32Format {
  using D = hn::ScalableTag<float>;
  using Elem = float;
  static HWY_INLINE hn::Vec<D> Load(D d, const void* base, size_t i) {
    return hn::LoadU(d, static_cast<const float*>(base) + i);
  }
  static HWY_INLINE hn::Vec<D> Narrow(D, hn::Vec<D> v) { return v; }
  static HWY_INLINE void Store(D d, hn::Vec<D> v, void* base, size_t i) {
    hn::StoreU(v, d, static_cast<float*>(base) + i);
  }
};

struct Float64Format {
  using D = hn::ScalableTag<double>;
  using Elem = double;
  static HWY_INLINE hn::Vec<D> Load(D d, const void* base, size_t i) {
    return hn::LoadU(d, static_cast<const double*>(base) + i);
  }
  static HWY_INLINE hn::Vec<D> Narrow(D, hn::Vec<D> v) { return v; }
  static HWY_INLINE void Store(D d, hn::Vec<D> v, void* base, size_t i) {
    hn::StoreU(v, d, static_cast<double*>(base) + i);
  }
};

struct HalfFormat {
  using D = hn::ScalableTag<float>;
  using Elem = uint16_t;
  static HWY_INLINE hn::Vec<D> Load(D d, const void* base, size_t i) {
    return LoadHalfAsFloat(d, static_cast<const uint16_t*>(base) + i);
  }
  static HWY_INLINE hn::Vec<hn::Rebind<uint16_t, D>> Narrow(D d, hn::Vec<D> v) {
    return FloatToHalfBits(d, v);
  }
  static HWY_INLINE void Store(D, hn::Vec<hn::Rebind<uint16_t, D>> v, void* base, size_t i) {
    hn::StoreU(v, hn::Rebind<uint16_t, D>(), static_cast<uint16_t*>(base) + i);
  }
};

struct BFloat16Format {
  using D = hn::ScalableTag<float>;
  using Elem = uint16_t;
  static HWY_INLINE hn::Vec<D> Load(D d, const void* base, size_t i) {
    return LoadBFloat16AsFloat(d, static_cast<const uint16_t*>(base) + i);
  }
  static HWY_INLINE hn::Vec<hn::Rebind<uint16_t, D>> Narrow(D d, hn::Vec<D> v) {
    return FloatToBFloat16Bits(d, v);
  }
  static HWY_INLINE void Store(D, hn::Vec<hn::Rebind<uint16_t, D>> v, void* base, size_t i) {
    hn::StoreU(v, hn::Rebind<uint16_t, D>(), static_cast<uint16_t*>(base) + i);
  }
};

struct SumOp {
  template <class V>
  static HWY_INLINE V Apply(V a, V b) {
    return hn::Add(a, b);
  }
};

struct ProductOp {
  template <class V>
  static HWY_INLINE V Apply(V a, V b) {
    return hn::Mul(a, b);
  }
};

// Min/Max of the SIMD library leave NaN handling unspecified; where either
// input is NaN, a + b is NaN, which is what we return.
struct MinOp {
  template <class V>
  static HWY_INLINE V Apply(V a, V b) {
    const auto any_nan = hn::Or(hn::IsNaN(a), hn::IsNaN(b));
    return hn::IfThenElse(any_nan, hn::Add(a, b), hn::Min(a, b));
  }
};

struct MaxOp {
  template <class V>
  static HWY_INLINE V Apply(V a, V b) {
    const auto any_nan = hn::Or(hn::IsNaN(a), hn::IsNaN(b));
    return hn::IfThenElse(any_nan, hn::Add(a, b), hn::Max(a, b));
  }
};

template <class Fmt, bool kPre>
HWY_INLINE hn::Vec<typename Fmt::D> LoadScaled(typename Fmt::D d, const void* base, size_t i,
                                               hn::Vec<typename Fmt::D> prescale) {
  auto v = Fmt::Load(d, base, i);
  if constexpr (kPre) v = hn::Mul(v, prescale);
  return v;
}

// The whole reduction for one format, op and scaling choice. kPre/kPost are
// template parameters so that a scale of 1.0 costs no multiply at all.
template <class Fmt, class Op, bool kPre, bool kPost>
HWY_NOINLINE void ReduceLoop(const ReduceArgs& args) {
  using D = typename Fmt::D;
  using T = hn::TFromD<D>;
  using Elem = typename Fmt::Elem;
  const D d;
  const size_t n = hn::Lanes(d);
  const auto pre = hn::Set(d, static_cast<T>(args.prescale));
  const auto post = hn::Set(d, static_cast<T>(args.postscale));
  const void* const* srcs = args.srcs;
  void* const* dsts = args.dsts;
  const size_t num_srcs = args.num_srcs;
  const size_t num_dsts = args.num_dsts;
  const size_t count = args.count;

  size_t i = 0;
  for (; i + 4 * n <= count; i += 4 * n) {
    auto v0 = LoadScaled<Fmt, kPre>(d, srcs[0], i, pre);
    auto v1 = LoadScaled<Fmt, kPre>(d, srcs[0], i + n, pre);
    auto v2 = LoadScaled<Fmt, kPre>(d, srcs[0], i + 2 * n, pre);
    auto v3 = LoadScaled<Fmt, kPre>(d, srcs[0], i + 3 * n, pre);
    for (size_t k = 1; k < num_srcs; ++k) {
      const void* src = srcs[k];
      v0 = Op::Apply(v0, LoadScaled<Fmt, kPre>(d, src, i, pre));
      v1 = Op::Apply(v1, LoadScaled<Fmt, kPre>(d, src, i + n, pre));
      v2 = Op::Apply(v2, LoadScaled<Fmt, kPre>(d, src, i + 2 * n, pre));
      v3 = Op::Apply(v3, LoadScaled<Fmt, kPre>(d, src, i + 3 * n, pre));
    }
    if constexpr (kPost) {
      v0 = hn::Mul(v0, post);
      v1 = hn::Mul(v1, post);
      v2 = hn::Mul(v2, post);
      v3 = hn::Mul(v3, post);
    }
    const auto s0 = Fmt::Narrow(d, v0);
    const auto s1 = Fmt::Narrow(d, v1);
    const auto s2 = Fmt::Narrow(d, v2);
    const auto s3 = Fmt::Narrow(d, v3);
    for (size_t k = 0; k < num_dsts; ++k) {
      void* dst = dsts[k];
      Fmt::Store(d, s0, dst, i);
      Fmt::Store(d, s1, dst, i + n);
      Fmt::Store(d, s2, dst, i + 2 * n);
      Fmt::Store(d, s3, dst, i + 3 * n);
    }
  }
  for (; i + n <= count; i += n) {
    auto v = LoadScaled<Fmt, kPre>(d, srcs[0], i, pre);
    for (size_t k = 1; k < num_srcs; ++k) {
      v = Op::Apply(v, LoadScaled<Fmt, kPre>(d, srcs[k], i, pre));
    }
    if constexpr (kPost) v = hn::Mul(v, post);
    const auto stored = Fmt::Narrow(d, v);
    for (size_t k = 0; k < num_dsts; ++k) Fmt::Store(d, stored, dsts[k], i);
  }
  if (i == count) return;

  // Tail shorter than one vector: run the same vector code on a padded copy,
  // so the last elements get exactly the arithmetic of all the others.
  const size_t rest = count - i;
  constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(T);
  HWY_ALIGN Elem in[kMaxLanes] = {};
  HWY_ALIGN Elem out[kMaxLanes] = {};
  auto load_tail = [&](const void* src) {
    std::memcpy(in, static_cast<const Elem*>(src) + i, rest * sizeof(Elem));
    return LoadScaled<Fmt, kPre>(d, in, 0, pre);
  };
  auto v = load_tail(srcs[0]);
  for (size_t k = 1; k < num_srcs; ++k) v = Op::Apply(v, load_tail(srcs[k]));
  if constexpr (kPost) v = hn::Mul(v, post);
  Fmt::Store(d, Fmt::Narrow(d, v), out, 0);
  for (size_t k = 0; k < num_dsts; ++k) {
    std::memcpy(static_cast<Elem*>(dsts[k]) + i, out, rest * sizeof(Elem));
  }
}

template <class Fmt, class Op>
void ReduceWithScales(const ReduceArgs& args) {
  const bool pre = args.prescale != 1.0;
  const bool post = args.postscale != 1.0;
  if (pre && post) return ReduceLoop<Fmt, Op, true, true>(args);
  if (pre) return ReduceLoop<Fmt, Op, true, false>(args);
  if (post) return ReduceLoop<Fmt, Op, false, true>(args);
  return ReduceLoop<Fmt, Op, false, false>(args);
}

template <class Fmt>
void ReduceWithFormat(const ReduceArgs& args) {
  switch (args.op) {
    case ReduceOp::kSum:
      return ReduceWithScales<Fmt, SumOp>(args);
    case ReduceOp::kProduct:
      return ReduceWithScales<Fmt, ProductOp>(args);
    case ReduceOp::kMin:
      return ReduceWithScales<Fmt, MinOp>(args);
    case ReduceOp::kMax:
      return ReduceWithScales<Fmt, MaxOp>(args);
    case ReduceOp::kAverage:
    case ReduceOp::kAdasum:
      break;  // Rejected by Reduce() before we get here.
  }
  HWY_ABORT("ReduceFloat: unexpected op %u", static_cast<unsigned>(args.op));
}

void ReduceFloatTarget(const ReduceArgs& args) {
  switch (args.dtype) {
    case DType::kFloat32:
      return ReduceWithFormat<Float32Format>(args);
    case DType::kFloat64:
      return ReduceWithFormat<Float64Format>(args);
    case DType::kFloat16:
      return ReduceWithFormat<HalfFormat>(args);
    case DType::kBFloat16:
      return ReduceWithFormat<BFloat16Format>(args);
    default:
      break;
  }
  HWY_ABORT("ReduceFloat: unexpected dtype %u", static_cast<unsigned>(args.dtype));
}

}  // namespace
}  // namespace kolo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kolo::kernels::internal {

HWY_EXPORT(ReduceFloatTarget);

void ReduceFloat(const ReduceArgs& args) { HWY_DYNAMIC_DISPATCH(ReduceFloatTarget)(args); }

}  // namespace kolo::kernels::internal
#endif  // HWY_ONCE
