// Conversions between float32 and the two 16-bit float formats Kolo reduces:
// IEEE binary16 ("half", float16) and bfloat16 (the upper half of a float32).
//
// Both directions are exact where the target format can hold the value;
// narrowing rounds to nearest, ties to even, overflows to infinity, and
// produces subnormals (and signed zero) where the format has them. A NaN stays
// a NaN with its sign and as much payload as fits, and always leaves a
// narrowing as a quiet NaN. float16 -> float32 also quiets a signalling NaN
// (as the x86 F16C instructions do); bfloat16 -> float32 is a plain shift.
//
// 16-bit values travel as their bit patterns in a uint16_t.
//
// Thread-safety: every function here is pure and safe to call concurrently.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace kolo::kernels {

// float32 -> float16 bit pattern, round to nearest even.
constexpr uint16_t FloatToHalf(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {  // NaN: keep the top payload bits, force quiet.
    return sign | 0x7E00u | static_cast<uint16_t>((abs >> 13) & 0x3FFu);
  }
  // 65520 = 65504 + half an ulp: ties go to the even neighbour, infinity.
  if (abs >= 0x477FF000u) return sign | 0x7C00u;
  if (abs < 0x38800000u) {  // Below 2^-14: a float16 subnormal or zero.
    const uint32_t exponent = abs >> 23;
    // The result counts units of 2^-24: mantissa * 2^(exponent - 150 + 24).
    const uint32_t shift = 126 - exponent;  // >= 14
    if (shift > 24) return sign;            // < 2^-25: rounds to zero.
    const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    uint32_t q = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) ++q;
    return sign | static_cast<uint16_t>(q);  // q == 0x400 is 2^-14, normal.
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits. A
  // carry out of the mantissa correctly bumps the exponent.
  const uint32_t rebiased = abs - ((127u - 15u) << 23);
  const uint32_t rounded = rebiased + 0xFFFu + ((rebiased >> 13) & 1u);
  return sign | static_cast<uint16_t>(rounded >> 13);
}

// float16 bit pattern -> float32 (exact; a signalling NaN comes back quiet).
constexpr float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1Fu;
  const uint32_t mantissa = half & 0x3FFu;
  if (exponent == 0x1F) {
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return std::bit_cast<float>(sign | 0x7F800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    // Subnormal: shift the leading one up to the implicit-bit position.
    const int lead = std::countl_zero(mantissa) - 21;  // Shifts to bit 10.
    const uint32_t normalized = (mantissa << lead) & 0x3FFu;
    const uint32_t exp32 = static_cast<uint32_t>(127 - 14 - lead);
    return std::bit_cast<float>(sign | (exp32 << 23) | (normalized << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

// float32 -> bfloat16 bit pattern, round to nearest even.
constexpr uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // Quiet NaN.
  }
  // Overflow needs no case of its own: the carry reaches the exponent and
  // the largest finite values round up to the infinity pattern.
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// bfloat16 bit pattern -> float32 (exact, NaN payload kept as is).
constexpr float BFloat16ToFloat(uint16_t bf16) {
  return std::bit_cast<float>(static_cast<uint32_t>(bf16) << 16);
}

// Array forms of the four conversions above, with the same results bit for
// bit, vectorized for the CPU found at run time. `src` and `dst` hold `count`
// elements each, must not overlap, and need only their element's alignment.
void HalfToFloatArray(const uint16_t* src, float* dst, size_t count);
void FloatToHalfArray(const float* src, uint16_t* dst, size_t count);
void BFloat16ToFloatArray(const uint16_t* src, float* dst, size_t count);
void FloatToBFloat16Array(const float* src, uint16_t* dst, size_t count);

}  // namespace kolo::kernels
