// The reduction kernels on hand-written cases, each stating its expected
// values outright: rounding of 16-bit floats, integer wrap-around,
// truncation and saturation, bool, scaling, bad arguments.
#include "kernels/cpu/reduce.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/reduce_test_models.h"
#include "proto/kolo/abi/types.h"

namespace kolo::kernels::reduce_testing {
namespace {

TEST(ReduceRoundingTest, Float16RoundsOnceToNearestEven) {
  ForEachTarget([] {
    // 2048 + 1 is halfway between 2048 and 2050: even is 2048.
    EXPECT_EQ(ReduceTwo<HalfModel>(ReduceOp::kSum, Fill(2048), Fill(1))[18], 2048.0f);
    // 2050 + 1 is halfway between 2050 and 2052: even is 2052.
    EXPECT_EQ(ReduceTwo<HalfModel>(ReduceOp::kSum, Fill(2050), Fill(1))[18], 2052.0f);
    // Overflow: 65504 + 16 = 65520, the tie between 65504 and 65536 -> inf.
    EXPECT_EQ(ReduceTwo<HalfModel>(ReduceOp::kSum, Fill(65504), Fill(16))[0], kInf);
    EXPECT_EQ(ReduceTwo<HalfModel>(ReduceOp::kSum, Fill(65504), Fill(15))[0], 65504.0f);
    EXPECT_EQ(ReduceTwo<HalfModel>(ReduceOp::kSum, Fill(-65504), Fill(-16))[0], -kInf);
    // Subnormals: 2^-24 + 2^-24 = 2^-23 exactly; scaling 2^-24 by 0.5 is a
    // tie between 0 and 2^-24, which goes to 0; by 0.75 rounds up.
    const float tiny = std::ldexp(1.0f, -24);
    EXPECT_EQ(ReduceTwo<HalfModel>(ReduceOp::kSum, Fill(tiny), Fill(tiny))[0],
              std::ldexp(1.0f, -23));
    EXPECT_EQ(ReduceTwo<HalfModel>(ReduceOp::kSum, Fill(tiny), Fill(0), 1.0, 0.5)[0], 0.0f);
    EXPECT_EQ(ReduceTwo<HalfModel>(ReduceOp::kSum, Fill(tiny), Fill(0), 1.0, 0.75)[0], tiny);
    // Accumulation is in float32: 2048 + 0.75 + 0.75 = 2049.5 rounds to 2050,
    // while rounding after each step would stay at 2048.
    std::vector<uint16_t> one(19, FloatToHalf(2048)), part(19, FloatToHalf(0.75f));
    std::vector<uint16_t> out(19);
    const void* srcs[] = {one.data(), part.data(), part.data()};
    void* dsts[] = {out.data()};
    ASSERT_TRUE(Reduce(DType::kFloat16, ReduceOp::kSum, srcs, dsts, 19).ok());
    EXPECT_EQ(HalfToFloat(out[18]), 2050.0f);  // 2049.5 -> 2050, not 2048.
  });
}

TEST(ReduceRoundingTest, BFloat16RoundsOnceToNearestEven) {
  ForEachTarget([] {
    const float half_ulp = std::ldexp(1.0f, -8);  // bf16 ulp at 1.0 is 2^-7.
    EXPECT_EQ(ReduceTwo<BFloat16Model>(ReduceOp::kSum, Fill(1), Fill(half_ulp))[18], 1.0f);
    EXPECT_EQ(ReduceTwo<BFloat16Model>(ReduceOp::kSum, Fill(1 + 2 * half_ulp), Fill(half_ulp))[18],
              1.0f + 4 * half_ulp);
    // Two parts of 0.75 half-ulp each: per-step rounding would stay at 1.0.
    std::vector<uint16_t> one(19, FloatToBFloat16(1.0f));
    std::vector<uint16_t> part(19, FloatToBFloat16(0.75f * half_ulp));
    std::vector<uint16_t> out(19);
    const void* srcs[] = {one.data(), part.data(), part.data()};
    void* dsts[] = {out.data()};
    ASSERT_TRUE(Reduce(DType::kBFloat16, ReduceOp::kSum, srcs, dsts, 19).ok());
    EXPECT_EQ(BFloat16ToFloat(out[0]), 1.0f + 2 * half_ulp);
    // Overflow to infinity.
    const float big = std::numeric_limits<float>::max();
    EXPECT_EQ(ReduceTwo<BFloat16Model>(ReduceOp::kSum, Fill(big), Fill(big))[0], kInf);
  });
}

TEST(ReduceIntegerTest, SumAndProductWrap) {
  std::vector<int8_t> a = {127, -128, 100, -1, 16};
  std::vector<int8_t> b = {1, -1, 100, -1, 16};
  std::vector<int8_t> out(5);
  const void* srcs[] = {a.data(), b.data()};
  void* dsts[] = {out.data()};
  ASSERT_TRUE(Reduce(DType::kInt8, ReduceOp::kSum, srcs, dsts, 5).ok());
  EXPECT_EQ(out, (std::vector<int8_t>{-128, 127, -56, -2, 32}));
  ASSERT_TRUE(Reduce(DType::kInt8, ReduceOp::kProduct, srcs, dsts, 5).ok());
  EXPECT_EQ(out, (std::vector<int8_t>{127, -128, 16, 1, 0}));

  std::vector<uint8_t> ua = {255, 200}, ub = {1, 2}, uout(2);
  const void* usrcs[] = {ua.data(), ub.data()};
  void* udsts[] = {uout.data()};
  ASSERT_TRUE(Reduce(DType::kUint8, ReduceOp::kSum, usrcs, udsts, 2).ok());
  EXPECT_EQ(uout, (std::vector<uint8_t>{0, 202}));
  ASSERT_TRUE(Reduce(DType::kUint8, ReduceOp::kProduct, usrcs, udsts, 2).ok());
  EXPECT_EQ(uout, (std::vector<uint8_t>{255, 144}));

  const int64_t max64 = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> la = {max64, max64}, lb = {1, 2}, lout(2);
  const void* lsrcs[] = {la.data(), lb.data()};
  void* ldsts[] = {lout.data()};
  ASSERT_TRUE(Reduce(DType::kInt64, ReduceOp::kSum, lsrcs, ldsts, 2).ok());
  EXPECT_EQ(lout, (std::vector<int64_t>{std::numeric_limits<int64_t>::min(),
                                        std::numeric_limits<int64_t>::min() + 1}));
  ASSERT_TRUE(Reduce(DType::kInt64, ReduceOp::kProduct, lsrcs, ldsts, 2).ok());
  EXPECT_EQ(lout, (std::vector<int64_t>{max64, -2}));

  std::vector<int32_t> ia = {std::numeric_limits<int32_t>::max()}, ib = {1}, iout(1);
  const void* isrcs[] = {ia.data(), ib.data()};
  void* idsts[] = {iout.data()};
  ASSERT_TRUE(Reduce(DType::kInt32, ReduceOp::kSum, isrcs, idsts, 1).ok());
  EXPECT_EQ(iout[0], std::numeric_limits<int32_t>::min());
}

TEST(ReduceIntegerTest, ScalingTruncatesAndSaturates) {
  std::vector<int8_t> a = {100, -100, 7, -7, 3};
  std::vector<int8_t> out(5);
  void* dsts[] = {out.data()};
  ASSERT_TRUE(ScaleCopy(DType::kInt8, a.data(), dsts, 5, 2.0).ok());
  EXPECT_EQ(out, (std::vector<int8_t>{127, -128, 14, -14, 6}));
  ASSERT_TRUE(ScaleCopy(DType::kInt8, a.data(), dsts, 5, 0.5).ok());
  EXPECT_EQ(out, (std::vector<int8_t>{50, -50, 3, -3, 1}));  // Toward zero.
  ASSERT_TRUE(ScaleCopy(DType::kInt8, a.data(), dsts, 5, std::nan("")).ok());
  EXPECT_EQ(out, (std::vector<int8_t>{0, 0, 0, 0, 0}));

  std::vector<uint8_t> u = {10, 200}, uout(2);
  void* udsts[] = {uout.data()};
  ASSERT_TRUE(ScaleCopy(DType::kUint8, u.data(), udsts, 2, -1.0).ok());
  EXPECT_EQ(uout, (std::vector<uint8_t>{0, 0}));
  ASSERT_TRUE(ScaleCopy(DType::kUint8, u.data(), udsts, 2, 1.5).ok());
  EXPECT_EQ(uout, (std::vector<uint8_t>{15, 255}));

  const int64_t max64 = std::numeric_limits<int64_t>::max();
  const int64_t min64 = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> l = {max64, min64, max64}, lout(3);
  void* ldsts[] = {lout.data()};
  ASSERT_TRUE(ScaleCopy(DType::kInt64, l.data(), ldsts, 3, 2.0).ok());
  EXPECT_EQ(lout, (std::vector<int64_t>{max64, min64, max64}));
  ASSERT_TRUE(ScaleCopy(DType::kInt64, l.data(), ldsts, 3, -1.0).ok());
  EXPECT_EQ(lout, (std::vector<int64_t>{min64, max64, min64}));

  // Prescale applies to each input before the (wrapping) sum.
  std::vector<int8_t> b = {100, 100}, c = {100, -100}, sum(2);
  const void* srcs[] = {b.data(), c.data()};
  void* sdsts[] = {sum.data()};
  ASSERT_TRUE(Reduce(DType::kInt8, ReduceOp::kSum, srcs, sdsts, 2, 2.0).ok());
  EXPECT_EQ(sum, (std::vector<int8_t>{-2, -1}));  // 127+127 wraps; 127-128.
}

TEST(ReduceIntegerTest, Int16WrapsTruncatesAndSaturates) {
  constexpr int16_t kMax = std::numeric_limits<int16_t>::max();
  constexpr int16_t kMin = std::numeric_limits<int16_t>::min();
  std::vector<int16_t> a = {kMax, kMin, 300, -7, 181, 5};
  std::vector<int16_t> b = {1, -1, 300, 9, 181, -5};
  std::vector<int16_t> out(6);
  const void* srcs[] = {a.data(), b.data()};
  void* dsts[] = {out.data()};
  ASSERT_TRUE(Reduce(DType::kInt16, ReduceOp::kSum, srcs, dsts, 6).ok());
  EXPECT_EQ(out, (std::vector<int16_t>{kMin, kMax, 600, 2, 362, 0}));
  // 300 * 300 = 90000 = 65536 + 24464; 181 * 181 = 32761; 7 * 9 = 63.
  ASSERT_TRUE(Reduce(DType::kInt16, ReduceOp::kProduct, srcs, dsts, 6).ok());
  EXPECT_EQ(out, (std::vector<int16_t>{kMax, kMin, 24464, -63, 32761, -25}));
  ASSERT_TRUE(Reduce(DType::kInt16, ReduceOp::kMin, srcs, dsts, 6).ok());
  EXPECT_EQ(out, (std::vector<int16_t>{1, kMin, 300, -7, 181, -5}));
  ASSERT_TRUE(Reduce(DType::kInt16, ReduceOp::kMax, srcs, dsts, 6).ok());
  EXPECT_EQ(out, (std::vector<int16_t>{kMax, -1, 300, 9, 181, 5}));
  // Scaling goes through double, truncates toward zero and saturates; an
  // average is a sum with postscale 1/n.
  ASSERT_TRUE(ScaleCopy(DType::kInt16, a.data(), dsts, 6, 2.0).ok());
  EXPECT_EQ(out, (std::vector<int16_t>{kMax, kMin, 600, -14, 362, 10}));
  ASSERT_TRUE(ScaleCopy(DType::kInt16, a.data(), dsts, 6, -0.5).ok());
  EXPECT_EQ(out, (std::vector<int16_t>{-16383, 16384, -150, 3, -90, -2}));
  ASSERT_TRUE(Reduce(DType::kInt16, ReduceOp::kSum, srcs, dsts, 6, 1.0, 0.5).ok());
  EXPECT_EQ(out, (std::vector<int16_t>{-16384, 16383, 300, 1, 181, 0}));
  ASSERT_TRUE(Reduce(DType::kInt16, ReduceOp::kSum, srcs, dsts, 6, 200.0, 1.0).ok());
  // Each input saturates first (kMax*200 -> kMax, 1*200 = 200), then the
  // sum wraps: kMax + 200 = kMin + 199.
  EXPECT_EQ(out, (std::vector<int16_t>{kMin + 199, kMax - 199, -2, 400, -2, 0}));
  // In place, three sources.
  std::vector<int16_t> x = {1000, -2}, y = {1000, 3}, z = {1000, -4};
  const void* three[] = {x.data(), y.data(), z.data()};
  void* self[] = {x.data()};
  ASSERT_TRUE(Reduce(DType::kInt16, ReduceOp::kSum, three, self, 2).ok());
  EXPECT_EQ(x, (std::vector<int16_t>{3000, -3}));
}

TEST(ReduceIntegerTest, Uint16WrapsTruncatesAndSaturates) {
  constexpr uint16_t kMax = std::numeric_limits<uint16_t>::max();
  std::vector<uint16_t> a = {kMax, 0, 300, 40000, 255, 7};
  std::vector<uint16_t> b = {1, kMax, 300, 30000, 257, 9};
  std::vector<uint16_t> out(6);
  const void* srcs[] = {a.data(), b.data()};
  void* dsts[] = {out.data()};
  // 40000 + 30000 = 70000 = 65536 + 4464.
  ASSERT_TRUE(Reduce(DType::kUint16, ReduceOp::kSum, srcs, dsts, 6).ok());
  EXPECT_EQ(out, (std::vector<uint16_t>{0, kMax, 600, 4464, 512, 16}));
  // 300 * 300 = 90000 = 65536 + 24464; 40000 * 30000 = 1200000000 =
  // 18310 * 65536 + 35840; 255 * 257 = 65535; kMax * kMax (past int's range
  // if promoted naively) = 1 modulo 65536.
  ASSERT_TRUE(Reduce(DType::kUint16, ReduceOp::kProduct, srcs, dsts, 6).ok());
  EXPECT_EQ(out, (std::vector<uint16_t>{kMax, 0, 24464, 35840, kMax, 63}));
  std::vector<uint16_t> m = {kMax}, mm(1);
  const void* msrcs[] = {m.data(), m.data()};
  void* mdsts[] = {mm.data()};
  ASSERT_TRUE(Reduce(DType::kUint16, ReduceOp::kProduct, msrcs, mdsts, 1).ok());
  EXPECT_EQ(mm, (std::vector<uint16_t>{1}));
  // Min and max are unsigned: kMax is the largest, not -1.
  ASSERT_TRUE(Reduce(DType::kUint16, ReduceOp::kMin, srcs, dsts, 6).ok());
  EXPECT_EQ(out, (std::vector<uint16_t>{1, 0, 300, 30000, 255, 7}));
  ASSERT_TRUE(Reduce(DType::kUint16, ReduceOp::kMax, srcs, dsts, 6).ok());
  EXPECT_EQ(out, (std::vector<uint16_t>{kMax, kMax, 300, 40000, 257, 9}));
  // Scaling goes through double, truncates toward zero and saturates to
  // 0..65535; an average is a sum with postscale 1/n.
  ASSERT_TRUE(ScaleCopy(DType::kUint16, a.data(), dsts, 6, 2.0).ok());
  EXPECT_EQ(out, (std::vector<uint16_t>{kMax, 0, 600, kMax, 510, 14}));
  ASSERT_TRUE(ScaleCopy(DType::kUint16, a.data(), dsts, 6, -0.5).ok());
  EXPECT_EQ(out, (std::vector<uint16_t>{0, 0, 0, 0, 0, 0}));
  ASSERT_TRUE(ScaleCopy(DType::kUint16, a.data(), dsts, 6, 0.3).ok());
  EXPECT_EQ(out, (std::vector<uint16_t>{19660, 0, 90, 12000, 76, 2}));
  ASSERT_TRUE(ScaleCopy(DType::kUint16, a.data(), dsts, 6, std::nan("")).ok());
  EXPECT_EQ(out, (std::vector<uint16_t>{0, 0, 0, 0, 0, 0}));
  ASSERT_TRUE(Reduce(DType::kUint16, ReduceOp::kSum, srcs, dsts, 6, 1.0, 0.5).ok());
  // The sum wraps first (kMax + 1 = 0; 40000 + 30000 = 4464), then halves.
  EXPECT_EQ(out, (std::vector<uint16_t>{0, 32767, 300, 2232, 256, 8}));
  ASSERT_TRUE(Reduce(DType::kUint16, ReduceOp::kSum, srcs, dsts, 6, 200.0, 1.0).ok());
  // Each input saturates first (kMax*200 -> kMax, 1*200 = 200), then the sum
  // wraps: kMax + 200 = 199; 300*200 = 60000, twice = 120000 - 65536 = 54464.
  EXPECT_EQ(out, (std::vector<uint16_t>{199, kMax, 54464, 65534, 36864, 3200}));
  // In place, three sources.
  std::vector<uint16_t> x = {30000, 2}, y = {30000, 3}, z = {30000, 4};
  const void* three[] = {x.data(), y.data(), z.data()};
  void* self[] = {x.data()};
  ASSERT_TRUE(Reduce(DType::kUint16, ReduceOp::kSum, three, self, 2).ok());
  EXPECT_EQ(x, (std::vector<uint16_t>{24464, 9}));  // 90000 - 65536.
}

// Bytes of bool inputs: anything but 0 is true.
constexpr uint8_t kT1 = 1, kT2 = 2, kT80 = 0x80, kTFF = 0xFF;

TEST(ReduceBoolTest, EveryOpReadsNonZeroAsTrueAndWritesZeroOrOne) {
  // Columns: (F,F) (F,T) (T,F) (T,T), the trues spelled in several bytes.
  std::vector<uint8_t> a = {0, 0, kT2, kT80, 0, kTFF, kT1, 0x7F};
  std::vector<uint8_t> b = {0, kTFF, 0, kT2, 0, 0, kT80, 0x10};
  std::vector<uint8_t> out(8, 0x5A), out2(8, 0x5A);
  const void* srcs[] = {a.data(), b.data()};
  void* dsts[] = {out.data(), out2.data()};
  const std::vector<uint8_t> any = {0, 1, 1, 1, 0, 1, 1, 1};
  const std::vector<uint8_t> all = {0, 0, 0, 1, 0, 0, 1, 1};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    SCOPED_TRACE(ReduceOpName(op));
    ASSERT_TRUE(Reduce(DType::kBool, op, srcs, dsts, 8).ok());
    EXPECT_EQ(out, any);
    EXPECT_EQ(out2, any);
  }
  for (ReduceOp op : {ReduceOp::kProduct, ReduceOp::kMin}) {
    SCOPED_TRACE(ReduceOpName(op));
    ASSERT_TRUE(Reduce(DType::kBool, op, srcs, dsts, 8).ok());
    EXPECT_EQ(out, all);
    EXPECT_EQ(out2, all);
  }
  // Sum is a logical or, not an addition: 0x80 + 0x80 would wrap to 0.
  std::vector<uint8_t> c = {kT80, kT80}, d = {kT80, 0}, sum(2);
  const void* cd[] = {c.data(), d.data()};
  void* sum_dst[] = {sum.data()};
  ASSERT_TRUE(Reduce(DType::kBool, ReduceOp::kSum, cd, sum_dst, 2).ok());
  EXPECT_EQ(sum, (std::vector<uint8_t>{1, 1}));
  // Product is a logical and: 2 * 0x80 would wrap to 0.
  std::vector<uint8_t> e = {kT2, kT2}, f = {kT80, 0};
  const void* ef[] = {e.data(), f.data()};
  ASSERT_TRUE(Reduce(DType::kBool, ReduceOp::kProduct, ef, sum_dst, 2).ok());
  EXPECT_EQ(sum, (std::vector<uint8_t>{1, 0}));
}

TEST(ReduceBoolTest, OneSourceInPlaceAndManySources) {
  // One source still normalizes: a reduction's bool bytes are 0 or 1.
  std::vector<uint8_t> a = {0, kT2, kTFF, kT1, kT80};
  void* self[] = {a.data()};
  const void* one[] = {a.data()};
  ASSERT_TRUE(Reduce(DType::kBool, ReduceOp::kMax, one, self, 5).ok());
  EXPECT_EQ(a, (std::vector<uint8_t>{0, 1, 1, 1, 1}));
  // Eight sources, in place into the last one, over more than one block.
  constexpr size_t kCount = 20000;
  std::vector<std::vector<uint8_t>> srcs(8, std::vector<uint8_t>(kCount));
  for (size_t k = 0; k < srcs.size(); ++k) {
    for (size_t i = 0; i < kCount; ++i) {
      // Element i is true in source k when bit k of i is set, as byte k+1.
      srcs[k][i] = ((i >> k) & 1) ? static_cast<uint8_t>(0x11 * (k + 1)) : 0;
    }
  }
  const std::vector<std::vector<uint8_t>> original = srcs;
  auto pointers = [&srcs] {
    std::vector<const void*> ptrs;
    for (auto& s : srcs) ptrs.push_back(s.data());
    return ptrs;
  };
  std::vector<uint8_t> copy(kCount);
  void* last_and_copy[] = {srcs.back().data(), copy.data()};
  ASSERT_TRUE(Reduce(DType::kBool, ReduceOp::kMin, pointers(), last_and_copy, kCount).ok());
  for (size_t i = 0; i < kCount; ++i) {
    const uint8_t want = (i & 0xFF) == 0xFF;
    ASSERT_EQ(copy[i], want) << i;
    ASSERT_EQ(srcs.back()[i], want) << i;
  }
  for (size_t k = 0; k + 1 < srcs.size(); ++k) EXPECT_EQ(srcs[k], original[k]);
  srcs = original;
  void* first[] = {srcs.front().data()};
  ASSERT_TRUE(Reduce(DType::kBool, ReduceOp::kSum, pointers(), first, kCount).ok());
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(srcs.front()[i], (i & 0xFF) != 0) << i;
}

TEST(ReduceBoolTest, RejectsAverageAndScalesButCopiesBitsAtScaleOne) {
  std::vector<uint8_t> a = {0, kT2, kTFF}, b = {kT1, 0, kT80}, out = {9, 9, 9};
  const void* srcs[] = {a.data(), b.data()};
  void* dsts[] = {out.data()};
  EXPECT_EQ(Reduce(DType::kBool, ReduceOp::kAverage, srcs, dsts, 3).code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status pre = Reduce(DType::kBool, ReduceOp::kSum, srcs, dsts, 3, 2.0, 1.0);
  EXPECT_EQ(pre.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(pre.message().find("bool"), std::string::npos) << pre;
  EXPECT_EQ(Reduce(DType::kBool, ReduceOp::kMax, srcs, dsts, 3, 1.0, 0.5).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScaleCopy(DType::kBool, a.data(), dsts, 3, -1.0).code(),
            absl::StatusCode::kInvalidArgument);
  // Even with nothing to touch.
  EXPECT_EQ(Reduce(DType::kBool, ReduceOp::kSum, srcs, dsts, 0, 1.0, 2.0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out, (std::vector<uint8_t>{9, 9, 9}));  // nothing written
  // A scale of 1.0 is a copy (a broadcast moves bytes as they are).
  ASSERT_TRUE(ScaleCopy(DType::kBool, a.data(), dsts, 3, 1.0).ok());
  EXPECT_EQ(out, a);
}

TEST(ReduceScaleTest, PrescaleAndPostscaleFloat) {
  ForEachTarget([] {
    const auto r = ReduceTwo<Float32Model>(ReduceOp::kSum, Fill(3), Fill(5), 2.0, 0.25);
    EXPECT_EQ(r[0], 4.0f);
    EXPECT_EQ(r[18], 4.0f);
    const auto m = ReduceTwo<Float64Model>(ReduceOp::kMax, Fill(3), Fill(5), -1.0, 1.0);
    EXPECT_EQ(m[18], -3.0f);
    const auto p = ReduceTwo<HalfModel>(ReduceOp::kProduct, Fill(3), Fill(5), 0.5, 4.0);
    EXPECT_EQ(p[18], 15.0f);
  });
}

TEST(ScaleCopyTest, CopiesAndScalesToEveryDst) {
  ForEachTarget([] {
    std::vector<float> src(1001);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) - 500.5f;
    std::vector<float> d1(src.size()), d2(src.size());
    void* dsts[] = {d1.data(), d2.data()};
    ASSERT_TRUE(ScaleCopy(DType::kFloat32, src.data(), dsts, src.size(), 1.0).ok());
    EXPECT_EQ(d1, src);
    EXPECT_EQ(d2, src);
    ASSERT_TRUE(ScaleCopy(DType::kFloat32, src.data(), dsts, src.size(), -2.0).ok());
    for (size_t i = 0; i < src.size(); ++i) {
      ASSERT_EQ(d1[i], src[i] * -2.0f);
      ASSERT_EQ(d2[i], src[i] * -2.0f);
    }
    // In place.
    void* self[] = {src.data()};
    ASSERT_TRUE(ScaleCopy(DType::kFloat32, src.data(), self, src.size(), -2.0).ok());
    EXPECT_EQ(src, d1);
    // A scale of 1.0 keeps every bit, even of a signalling NaN.
    std::vector<uint16_t> h = {0x7C01, 0x3C00}, hout(2);
    void* hdsts[] = {hout.data()};
    ASSERT_TRUE(ScaleCopy(DType::kFloat16, h.data(), hdsts, 2, 1.0).ok());
    EXPECT_EQ(hout, h);
  });
}

TEST(ReduceArgsTest, RejectsBadArguments) {
  std::vector<float> a(64), b(64), out(64);
  const void* srcs[] = {a.data(), b.data()};
  void* dsts[] = {out.data()};
  auto code = [](const absl::Status& s) { return s.code(); };
  EXPECT_EQ(code(Reduce(DType::kFloat32, ReduceOp::kAverage, srcs, dsts, 64)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Reduce(DType::kFloat32, static_cast<ReduceOp>(99), srcs, dsts, 64)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Reduce(static_cast<DType>(42), ReduceOp::kSum, srcs, dsts, 64)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Reduce(DType::kFloat32, ReduceOp::kSum, {}, dsts, 64)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Reduce(DType::kFloat32, ReduceOp::kSum, srcs, {}, 64)),
            absl::StatusCode::kInvalidArgument);
  const void* null_src[] = {a.data(), nullptr};
  EXPECT_EQ(code(Reduce(DType::kFloat32, ReduceOp::kSum, null_src, dsts, 64)),
            absl::StatusCode::kInvalidArgument);
  // ...but null is fine when there is nothing to touch.
  EXPECT_TRUE(Reduce(DType::kFloat32, ReduceOp::kSum, null_src, dsts, 0).ok());
  // Misaligned element.
  const void* odd_src[] = {reinterpret_cast<const char*>(a.data()) + 1, b.data()};
  EXPECT_EQ(code(Reduce(DType::kFloat32, ReduceOp::kSum, odd_src, dsts, 8)),
            absl::StatusCode::kInvalidArgument);
  // Partial overlaps: dst shifted by one element against a src or a dst.
  void* shifted[] = {a.data() + 1};
  EXPECT_EQ(code(Reduce(DType::kFloat32, ReduceOp::kSum, srcs, shifted, 32)),
            absl::StatusCode::kInvalidArgument);
  void* two_overlapping[] = {out.data(), out.data() + 4};
  EXPECT_EQ(code(Reduce(DType::kFloat32, ReduceOp::kSum, srcs, two_overlapping, 32)),
            absl::StatusCode::kInvalidArgument);
  // Adjacent, non-overlapping ranges are fine.
  void* adjacent[] = {out.data(), out.data() + 32};
  EXPECT_TRUE(Reduce(DType::kFloat32, ReduceOp::kSum, srcs, adjacent, 32).ok());
  EXPECT_EQ(code(ScaleCopy(DType::kFloat32, a.data(), shifted, 32, 2.0)),
            absl::StatusCode::kInvalidArgument);
  // Nothing was written by the rejected calls.
  EXPECT_EQ(a, std::vector<float>(64));
}

}  // namespace
}  // namespace kolo::kernels::reduce_testing
