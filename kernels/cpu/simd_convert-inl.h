// Per-target SIMD widening loads of float16 / bfloat16 into float32 lanes and
// narrowing of float32 lanes back to 16-bit patterns,
// bit-identical to the scalar conversions in half.h (round to nearest even,
// NaN stays NaN and leaves quiet, subnormals and overflow exact).
//
// Targets with F16C (AVX2 and up) use the hardware instructions for float16.
// Everywhere else, and for bfloat16 always, the conversion is done with
// integer lane operations, because the library's portable fallbacks truncate
// instead of rounding and do not carry infinities or NaNs across.
//
// This header is compiled once per SIMD target (it is included from files
// that use the per-target multiple-inclusion scheme), so it uses a toggling
// guard instead of #pragma once.
//
// Thread-safety: pure functions.

#if defined(KOLO_KERNELS_CPU_SIMD_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KOLO_KERNELS_CPU_SIMD_CONVERT_INL_H_
#undef KOLO_KERNELS_CPU_SIMD_CONVERT_INL_H_
#else
#define KOLO_KERNELS_CPU_SIMD_CONVERT_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kolo::kernels::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

#undef KOLO_HAVE_HW_F16
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
#define KOLO_HAVE_HW_F16 1
#else
#define KOLO_HAVE_HW_F16 0
#endif

// Loads Lanes(df) float16 values from `p` (any 2-byte alignment).
template <class DF>
HWY_INLINE hn::Vec<DF> LoadHalfAsFloat(DF df, const uint16_t* HWY_RESTRICT p) {
#if KOLO_HAVE_HW_F16
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
#else
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> du16;
  const auto bits = hn::PromoteTo(du, hn::LoadU(du16, p));
  const auto sign = hn::ShiftLeft<16>(hn::And(bits, hn::Set(du, 0x8000u)));
  const auto abs = hn::And(bits, hn::Set(du, 0x7FFFu));
  const auto exponent = hn::And(bits, hn::Set(du, 0x7C00u));
  const auto mantissa = hn::And(bits, hn::Set(du, 0x3FFu));
  // Normal: move the fields up and rebias (127 - 15) << 23.
  const auto normal = hn::Add(hn::ShiftLeft<13>(abs), hn::Set(du, 0x38000000u));
  // Inf/NaN: rebias once more to reach exponent 255, quiet any NaN.
  const auto nan_quiet =
      hn::IfThenElseZero(hn::RebindMask(du, hn::Ne(hn::BitCast(di, mantissa), hn::Zero(di))),
                         hn::Set(du, 0x00400000u));
  const auto inf_nan = hn::Or(hn::Add(normal, hn::Set(du, 0x38000000u)), nan_quiet);
  // Subnormal (and zero): mantissa * 2^-24 is exact in float32.
  const auto sub = hn::BitCast(
      du, hn::Mul(hn::ConvertTo(df, hn::BitCast(di, mantissa)), hn::Set(df, 1.0f / 16777216.0f)));
  const auto is_sub = hn::RebindMask(du, hn::Eq(hn::BitCast(di, exponent), hn::Zero(di)));
  const auto is_inf_nan =
      hn::RebindMask(du, hn::Eq(hn::BitCast(di, exponent), hn::Set(di, 0x7C00)));
  const auto mag = hn::IfThenElse(is_sub, sub, hn::IfThenElse(is_inf_nan, inf_nan, normal));
  return hn::BitCast(df, hn::Or(mag, sign));
#endif
}

// Narrows the float32 lanes of `v` to float16 bit patterns.
template <class DF>
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> FloatToHalfBits(DF df, hn::Vec<DF> v) {
  const hn::Rebind<uint16_t, DF> du16;
#if KOLO_HAVE_HW_F16
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::BitCast(du16, hn::DemoteTo(dh, v));
#else
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::BitCast(du, v);
  const auto sign = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 0x8000u));
  const auto abs = hn::And(bits, hn::Set(du, 0x7FFFFFFFu));
  const auto abs_i = hn::BitCast(di, abs);  // Non-negative: signed compares.
  // Normal: rebias by -(127 - 15) << 23 and round off 13 bits to even.
  const auto lsb = hn::And(hn::ShiftRight<13>(abs), hn::Set(du, 1u));
  const auto normal = hn::ShiftRight<13>(hn::Add(hn::Add(abs, hn::Set(du, 0xC8000FFFu)), lsb));
  // Below 2^-14: adding 0.5f leaves exactly the float16 subnormal count in
  // the low mantissa bits, rounded to nearest even by the float adder.
  const auto sub = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, abs), hn::Set(df, 0.5f))),
                           hn::Set(du, 0x3F000000u));
  const auto nan =
      hn::Or(hn::And(hn::ShiftRight<13>(abs), hn::Set(du, 0x3FFu)), hn::Set(du, 0x7E00u));
  auto mag =
      hn::IfThenElse(hn::RebindMask(du, hn::Lt(abs_i, hn::Set(di, 0x38800000))), sub, normal);
  mag = hn::IfThenElse(hn::RebindMask(du, hn::Gt(abs_i, hn::Set(di, 0x477FEFFF))),
                       hn::Set(du, 0x7C00u), mag);
  mag = hn::IfThenElse(hn::RebindMask(du, hn::Gt(abs_i, hn::Set(di, 0x7F800000))), nan, mag);
  const auto half = hn::BitCast(di, hn::Or(mag, sign));  // <= 0xFFFF
  return hn::DemoteTo(du16, half);
#endif
}

// Loads Lanes(df) bfloat16 values from `p` (any 2-byte alignment).
template <class DF>
HWY_INLINE hn::Vec<DF> LoadBFloat16AsFloat(DF df, const uint16_t* HWY_RESTRICT p) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> du16;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(du16, p))));
}

// Narrows the float32 lanes of `v` to bfloat16 bit patterns.
template <class DF>
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> FloatToBFloat16Bits(DF df, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> du16;
  const auto bits = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(bits, hn::Set(du, 0x7FFFu)), lsb));
  const auto nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40u));
  const auto abs_i = hn::BitCast(di, hn::And(bits, hn::Set(du, 0x7FFFFFFFu)));
  const auto out =
      hn::IfThenElse(hn::RebindMask(du, hn::Gt(abs_i, hn::Set(di, 0x7F800000))), nan, rounded);
  return hn::DemoteTo(du16, hn::BitCast(di, out));
}

}  // namespace kolo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KOLO_KERNELS_CPU_SIMD_CONVERT_INL_H_ toggle
