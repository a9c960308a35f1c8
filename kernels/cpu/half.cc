// Array conversions of half.h: one copy of each loop per SIMD target, chosen
// at run time. Tails shorter than a vector use the scalar conversions, which
// give the same bits.

#include <cstddef>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/half.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/simd_convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kolo::kernels::HWY_NAMESPACE {
namespace {

void HalfToFloatLoop(const uint16_t* HWY_RESTRICT src, float* HWY_RESTRICT dst, size_t count) {
  const hn::ScalableTag<float> df;
  const size_t n = hn::Lanes(df);
  size_t i = 0;
  for (; i + n <= count; i += n) {
    hn::StoreU(LoadHalfAsFloat(df, src + i), df, dst + i);
  }
  for (; i < count; ++i) dst[i] = HalfToFloat(src[i]);
}

void FloatToHalfLoop(const float* HWY_RESTRICT src, uint16_t* HWY_RESTRICT dst, size_t count) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const size_t n = hn::Lanes(df);
  size_t i = 0;
  for (; i + n <= count; i += n) {
    hn::StoreU(FloatToHalfBits(df, hn::LoadU(df, src + i)), du16, dst + i);
  }
  for (; i < count; ++i) dst[i] = FloatToHalf(src[i]);
}

void BFloat16ToFloatLoop(const uint16_t* HWY_RESTRICT src, float* HWY_RESTRICT dst, size_t count) {
  const hn::ScalableTag<float> df;
  const size_t n = hn::Lanes(df);
  size_t i = 0;
  for (; i + n <= count; i += n) {
    hn::StoreU(LoadBFloat16AsFloat(df, src + i), df, dst + i);
  }
  for (; i < count; ++i) dst[i] = BFloat16ToFloat(src[i]);
}

void FloatToBFloat16Loop(const float* HWY_RESTRICT src, uint16_t* HWY_RESTRICT dst, size_t count) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const size_t n = hn::Lanes(df);
  size_t i = 0;
  for (; i + n <= count; i += n) {
    hn::StoreU(FloatToBFloat16Bits(df, hn::LoadU(df, src + i)), du16, dst + i);
  }
  for (; i < count; ++i) dst[i] = FloatToBFloat16(src[i]);
}

}  // namespace
}  // namespace kolo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kolo::kernels {

HWY_EXPORT(HalfToFloatLoop);
HWY_EXPORT(FloatToHalfLoop);
HWY_EXPORT(BFloat16ToFloatLoop);
HWY_EXPORT(FloatToBFloat16Loop);

void HalfToFloatArray(const uint16_t* src, float* dst, size_t count) {
  HWY_DYNAMIC_DISPATCH(HalfToFloatLoop)(src, dst, count);
}
void FloatToHalfArray(const float* src, uint16_t* dst, size_t count) {
  HWY_DYNAMIC_DISPATCH(FloatToHalfLoop)(src, dst, count);
}
void BFloat16ToFloatArray(const uint16_t* src, float* dst, size_t count) {
  HWY_DYNAMIC_DISPATCH(BFloat16ToFloatLoop)(src, dst, count);
}
void FloatToBFloat16Array(const float* src, uint16_t* dst, size_t count) {
  HWY_DYNAMIC_DISPATCH(FloatToBFloat16Loop)(src, dst, count);
}

}  // namespace kolo::kernels
#endif  // HWY_ONCE
