#include "kernels/cpu/half.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "kernels/cpu/simd_targets_testing.h"

namespace kolo::kernels {
namespace {

// Test-side decoding of float16, written from the format definition.
double RefHalfValue(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 31) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// Test-side rounding of `x` to a binary format with `mantissa_bits` stored
// bits, smallest normal exponent `min_exponent` and largest finite `max`:
// scale to units of the ulp, round to nearest even in double, scale back.
double RefNarrow(float x, int mantissa_bits, int min_exponent, double max) {
  if (std::isnan(x) || std::isinf(x)) return x;
  const double a = std::fabs(static_cast<double>(x));
  if (a == 0) return x;
  const int exponent = std::max(std::ilogb(a), min_exponent);
  const double ulp = std::ldexp(1.0, exponent - mantissa_bits);
  double r = std::nearbyint(a / ulp) * ulp;
  if (r > max) r = std::numeric_limits<double>::infinity();
  return std::copysign(r, static_cast<double>(x));
}

constexpr double kHalfMax = 65504.0;
const double kBFloat16Max = std::ldexp(255.0, 120);  // (2 - 2^-7) * 2^127

double RefHalfRound(float x) { return RefNarrow(x, 10, -14, kHalfMax); }
double RefBFloat16Round(float x) { return RefNarrow(x, 7, -126, kBFloat16Max); }

bool SameValue(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

bool IsHalfNaN(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF); }
bool IsBFloat16NaN(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F); }

// Floats that probe every rounding boundary of both 16-bit formats: each
// representable value, each exact midpoint and its float neighbours, the
// overflow and underflow edges, and a sweep across all float bit patterns.
std::vector<float> ProbeFloats() {
  std::vector<float> out;
  auto add_around = [&out](float f) {
    out.push_back(f);
    out.push_back(std::nextafter(f, std::numeric_limits<float>::infinity()));
    out.push_back(std::nextafter(f, -std::numeric_limits<float>::infinity()));
  };
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const double lo = RefHalfValue(static_cast<uint16_t>(h));
    const double hi = RefHalfValue(static_cast<uint16_t>(h + 1));
    for (float sign : {1.0f, -1.0f}) {
      add_around(sign * static_cast<float>(lo));
      add_around(sign * static_cast<float>((lo + hi) / 2));  // exact in float
    }
  }
  for (uint32_t b = 0; b < 0x7F80; ++b) {
    const float lo = BFloat16ToFloat(static_cast<uint16_t>(b));
    const float hi = BFloat16ToFloat(static_cast<uint16_t>(b + 1));
    for (float sign : {1.0f, -1.0f}) {
      add_around(sign * lo);
      add_around(sign * std::bit_cast<float>(
                            (std::bit_cast<uint32_t>(lo) + std::bit_cast<uint32_t>(hi)) / 2));
    }
  }
  for (float f : {65504.0f, 65519.0f, 65520.0f, 65536.0f, 1e30f, std::ldexp(1.0f, -24),
                  std::ldexp(1.0f, -25), std::ldexp(3.0f, -26), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity()}) {
    add_around(f);
    add_around(-f);
  }
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFu; bits += 4093) {
    out.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  }
  for (uint32_t nan : {0x7F800001u, 0x7FC00000u, 0xFFC00001u, 0x7FFFFFFFu, 0x7F802000u, 0xFF801FFFu,
                       0x7FBFE000u}) {
    out.push_back(std::bit_cast<float>(nan));
  }
  return out;
}

TEST(HalfTest, EveryHalfPatternDecodesAndRoundTrips) {
  for (uint32_t i = 0; i <= 0xFFFF; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = HalfToFloat(h);
    if (IsHalfNaN(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
      // Payload kept, NaN made quiet.
      ASSERT_EQ(FloatToHalf(f), h | 0x0200) << std::hex << h;
    } else {
      ASSERT_TRUE(SameValue(f, RefHalfValue(h))) << std::hex << h << " -> " << f;
      ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
    }
  }
}

TEST(HalfTest, EveryBFloat16PatternDecodesAndRoundTrips) {
  for (uint32_t i = 0; i <= 0xFFFF; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const float f = BFloat16ToFloat(b);
    ASSERT_EQ(std::bit_cast<uint32_t>(f), i << 16);
    if (IsBFloat16NaN(b)) {
      ASSERT_TRUE(std::isnan(f));
      ASSERT_EQ(FloatToBFloat16(f), b | 0x0040) << std::hex << b;
    } else {
      ASSERT_EQ(FloatToBFloat16(f), b) << std::hex << b;
    }
  }
}

TEST(HalfTest, NarrowingRoundsToNearestEven) {
  for (float x : ProbeFloats()) {
    const uint16_t h = FloatToHalf(x);
    ASSERT_TRUE(SameValue(HalfToFloat(h), RefHalfRound(x)))
        << "float16 of " << x << " (bits " << std::hex << std::bit_cast<uint32_t>(x) << ") gave "
        << h;
    const uint16_t b = FloatToBFloat16(x);
    ASSERT_TRUE(SameValue(BFloat16ToFloat(b), RefBFloat16Round(x)))
        << "bfloat16 of " << x << " (bits " << std::hex << std::bit_cast<uint32_t>(x) << ") gave "
        << b;
  }
}

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.99f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // Tie: rounds to even = inf.
  EXPECT_EQ(FloatToHalf(-1e9f), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // Tie to even: 0.
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp -> 2.
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(2049.0f), 0x6800);  // 2048: tie to even.
  EXPECT_EQ(FloatToHalf(2051.0f), 0x6802);  // 2052: tie to even.
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(FloatToHalf(std::bit_cast<float>(0x7F800001u)),
            0x7E00);                                                // sNaN stays NaN.
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // Tie: 1.0.
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(3.0f, -8)), 0x3F82);  // Tie: up.
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(0x00010000u)),
            0x0001);  // Subnormal.
  static_assert(FloatToHalf(1.0f) == 0x3C00 && HalfToFloat(0x3C00) == 1.0f);
}

TEST(HalfTest, ArrayWideningMatchesScalarOnEveryPattern) {
  std::vector<uint16_t> all(0x10000);
  for (uint32_t i = 0; i <= 0xFFFF; ++i) all[i] = static_cast<uint16_t>(i);
  ForEachTarget([&] {
    // Offset 1 and an odd count exercise unaligned starts and the tail.
    for (size_t offset : {0, 1}) {
      const size_t count = all.size() - offset - (offset ? 2 : 0);
      std::vector<float> out(count);
      HalfToFloatArray(all.data() + offset, out.data(), count);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i]),
                  std::bit_cast<uint32_t>(HalfToFloat(all[i + offset])))
            << std::hex << all[i + offset];
      }
      BFloat16ToFloatArray(all.data() + offset, out.data(), count);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i]),
                  std::bit_cast<uint32_t>(BFloat16ToFloat(all[i + offset])))
            << std::hex << all[i + offset];
      }
    }
  });
}

TEST(HalfTest, ArrayNarrowingMatchesScalar) {
  const std::vector<float> probes = ProbeFloats();
  ForEachTarget([&] {
    for (size_t offset : {0, 1}) {
      const size_t count = probes.size() - offset;
      std::vector<uint16_t> out(count);
      FloatToHalfArray(probes.data() + offset, out.data(), count);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], FloatToHalf(probes[i + offset]))
            << std::hex << std::bit_cast<uint32_t>(probes[i + offset]);
      }
      FloatToBFloat16Array(probes.data() + offset, out.data(), count);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], FloatToBFloat16(probes[i + offset]))
            << std::hex << std::bit_cast<uint32_t>(probes[i + offset]);
      }
    }
  });
}

}  // namespace
}  // namespace kolo::kernels
