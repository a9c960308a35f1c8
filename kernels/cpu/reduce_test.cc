// The reduction kernels against the test-side reference, every dtype, op,
// layout and scale, on every SIMD target; NaN and infinity.
#include "kernels/cpu/reduce.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/reduce_test_models.h"
#include "proto/kolo/abi/types.h"

namespace kolo::kernels::reduce_testing {
namespace {

// ---------------------------------------------------------------------------
// Inputs: deterministic (fixed seed), shaped per op so that products do not
// all overflow; with `specials`, floats are sprinkled with NaN and +-inf.

template <class M>
typename M::S RandomInput(std::mt19937_64& rng, ReduceOp op, bool specials) {
  using S = typename M::S;
  if constexpr (std::is_same_v<typename M::C, bool>) {
    // Any byte: true ones are 1..255. Or-like ops see mostly false, and-like
    // ops mostly true, so over up to 8 sources both results are common.
    const bool or_like = op == ReduceOp::kSum || op == ReduceOp::kMax;
    const bool is_false = or_like ? rng() % 8 != 0 : rng() % 8 == 0;
    return is_false ? S{0} : static_cast<S>(1 + rng() % 255);
  } else if constexpr (std::is_integral_v<typename M::C>) {
    return static_cast<S>(rng());  // Full range: exercises wrap/saturation.
  } else {
    if (specials && rng() % 16 == 0) {
      const float pick[] = {kNaN, kInf, -kInf, -0.0f};
      return M::Encode(pick[rng() % 4]);
    }
    // A value exact in every float format: 8 significant bits.
    const int mantissa = static_cast<int>(rng() % 256) + 1;
    const int exponent = op == ReduceOp::kProduct ? static_cast<int>(rng() % 3) - 8
                                                  : static_cast<int>(rng() % 12) - 10;
    const float sign = (rng() & 1) ? -1.0f : 1.0f;
    return M::Encode(sign * std::ldexp(static_cast<float>(mantissa), exponent));
  }
}

// Where results go, relative to the sources.
enum class Layout {
  kOneDst,        // one separate buffer
  kThreeDsts,     // three separate buffers
  kInPlaceFirst,  // dst0 is src0, plus one separate buffer
  kInPlaceLast,   // dst0 is the last src, plus one separate buffer
};

std::string LayoutName(Layout l) {
  switch (l) {
    case Layout::kOneDst:
      return "one-dst";
    case Layout::kThreeDsts:
      return "three-dsts";
    case Layout::kInPlaceFirst:
      return "in-place-first";
    case Layout::kInPlaceLast:
      return "in-place-last";
  }
  return "?";
}

template <class M>
void CheckOneCall(ReduceOp op, size_t count, size_t num_srcs, Layout layout, double pre,
                  double post, bool specials, std::mt19937_64& rng) {
  using S = typename M::S;
  using C = typename M::C;
  SCOPED_TRACE(std::string(DTypeName(M::kDType)) + " " + std::string(ReduceOpName(op)) +
               " count=" + std::to_string(count) + " srcs=" + std::to_string(num_srcs) + " " +
               LayoutName(layout) + " pre=" + std::to_string(pre) +
               " post=" + std::to_string(post));
  std::vector<std::vector<S>> srcs(num_srcs, std::vector<S>(count));
  for (auto& s : srcs) {
    for (auto& x : s) x = RandomInput<M>(rng, op, specials);
  }
  std::vector<C> want(count);
  for (size_t i = 0; i < count; ++i) want[i] = RefReduceElement<M>(op, srcs, i, pre, post);

  // Buffers the kernel sees; separate dsts start filled with garbage.
  std::vector<std::vector<S>> work = srcs;
  const size_t separate = layout == Layout::kThreeDsts ? 3 : 1;
  std::vector<std::vector<S>> extra(separate, std::vector<S>(count, static_cast<S>(0x5A)));
  std::vector<const void*> src_ptrs;
  for (auto& w : work) src_ptrs.push_back(w.data());
  std::vector<void*> dst_ptrs;
  if (layout == Layout::kInPlaceFirst) dst_ptrs.push_back(work.front().data());
  if (layout == Layout::kInPlaceLast) dst_ptrs.push_back(work.back().data());
  for (auto& e : extra) dst_ptrs.push_back(e.data());

  ASSERT_TRUE(Reduce(M::kDType, op, src_ptrs, dst_ptrs, count, pre, post).ok());
  for (void* dst : dst_ptrs) {
    const S* out = static_cast<const S*>(dst);
    for (size_t i = 0; i < count; ++i) {
      if constexpr (std::is_same_v<C, bool>) {
        ASSERT_LE(out[i], 1) << "element " << i << ": a bool result byte that is not 0 or 1";
      }
      const C got = M::Decode(out[i]);
      ASSERT_TRUE(SameResult<C>(got, want[i]))
          << "element " << i << ": got " << +got << ", want " << +want[i];
    }
  }
  // Sources that are not destinations are untouched.
  for (size_t k = 0; k < num_srcs; ++k) {
    const bool is_dst = (layout == Layout::kInPlaceFirst && k == 0) ||
                        (layout == Layout::kInPlaceLast && k == num_srcs - 1);
    // (Empty vectors may have null data(), which memcmp may not be handed.)
    if (!is_dst && count > 0) {
      ASSERT_EQ(std::memcmp(work[k].data(), srcs[k].data(), count * sizeof(S)), 0);
    }
  }
}

struct Scales {
  double pre;
  double post;
};

template <class M>
void CheckMatrix(ReduceOp op, std::initializer_list<Scales> scales, bool specials) {
  std::mt19937_64 rng(1234 + static_cast<int>(op));
  for (size_t count : {0, 1, 7, 1000, 4099}) {
    for (size_t num_srcs = 1; num_srcs <= 8; ++num_srcs) {
      for (Layout layout :
           {Layout::kOneDst, Layout::kThreeDsts, Layout::kInPlaceFirst, Layout::kInPlaceLast}) {
        for (const Scales& s : scales) {
          CheckOneCall<M>(op, count, num_srcs, layout, s.pre, s.post, specials, rng);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

template <class M>
void CheckFloatType() {
  ForEachTarget([] {
    for (ReduceOp op : kOps) {
      CheckMatrix<M>(op, {{1.0, 1.0}, {0.5, 1.0}, {1.0, 0.1}, {-3.0, 0.25}},
                     /*specials=*/false);
      CheckMatrix<M>(op, {{1.0, 1.0}}, /*specials=*/true);
    }
  });
}

template <class M>
void CheckIntType() {
  for (ReduceOp op : kOps) {
    CheckMatrix<M>(op, {{1.0, 1.0}, {1.0, 0.5}, {2.5, 1.0}, {-1.5, 0.3}}, false);
  }
}

TEST(ReduceMatrixTest, Float32) { CheckFloatType<Float32Model>(); }
TEST(ReduceMatrixTest, Float64) { CheckFloatType<Float64Model>(); }
TEST(ReduceMatrixTest, Float16) { CheckFloatType<HalfModel>(); }
TEST(ReduceMatrixTest, BFloat16) { CheckFloatType<BFloat16Model>(); }
TEST(ReduceMatrixTest, Uint8) { CheckIntType<Uint8Model>(); }
TEST(ReduceMatrixTest, Int8) { CheckIntType<Int8Model>(); }
TEST(ReduceMatrixTest, Int16) { CheckIntType<Int16Model>(); }
TEST(ReduceMatrixTest, Uint16) { CheckIntType<Uint16Model>(); }
TEST(ReduceMatrixTest, Bool) {
  for (ReduceOp op : kOps) CheckMatrix<BoolModel>(op, {{1.0, 1.0}}, false);
}
TEST(ReduceMatrixTest, Int32) { CheckIntType<Int32Model>(); }
TEST(ReduceMatrixTest, Int64) { CheckIntType<Int64Model>(); }

template <class M>
void CheckSpecialValues() {
  // 19 elements: a full vector on every target plus a tail.
  const std::vector<float> a = {kNaN, 1, kInf, -kInf, kInf, 2,  kNaN, -kInf, 3,   4,
                                5,    6, 7,    8,     9,    10, 11,   12,    kNaN};
  const std::vector<float> b = {1, kNaN, 1, -1, -kInf, kInf, kNaN, 5,  -3, 4,
                                5, 6,    7, 8,  9,     10,   11,   12, 0};
  auto is_nan = [](float x) { return std::isnan(x); };
  const auto sum = ReduceTwo<M>(ReduceOp::kSum, a, b);
  EXPECT_TRUE(is_nan(sum[0]) && is_nan(sum[1]) && is_nan(sum[4]) && is_nan(sum[6]));
  EXPECT_EQ(sum[2], kInf);
  EXPECT_EQ(sum[3], -kInf);
  EXPECT_EQ(sum[5], kInf);
  EXPECT_EQ(sum[8], 0.0f);
  EXPECT_TRUE(is_nan(sum[18]));
  const auto mn = ReduceTwo<M>(ReduceOp::kMin, a, b);
  const auto mx = ReduceTwo<M>(ReduceOp::kMax, a, b);
  for (size_t i : {0, 1, 6, 18}) {
    EXPECT_TRUE(is_nan(mn[i])) << i;
    EXPECT_TRUE(is_nan(mx[i])) << i;
  }
  EXPECT_EQ(mn[2], 1.0f);
  EXPECT_EQ(mx[2], kInf);
  EXPECT_EQ(mn[3], -kInf);
  EXPECT_EQ(mx[3], -1.0f);
  EXPECT_EQ(mn[7], -kInf);
  EXPECT_EQ(mx[7], 5.0f);
  EXPECT_EQ(mn[8], -3.0f);
  EXPECT_EQ(mx[8], 3.0f);
  const auto prod = ReduceTwo<M>(ReduceOp::kProduct, a, b);
  EXPECT_TRUE(is_nan(prod[0]));
  EXPECT_EQ(prod[3], kInf);
  EXPECT_EQ(prod[4], -kInf);
  EXPECT_TRUE(is_nan(prod[18]));  // NaN * 0.
}

TEST(ReduceSpecialTest, NaNAndInfinity) {
  ForEachTarget([] {
    CheckSpecialValues<Float32Model>();
    CheckSpecialValues<Float64Model>();
    CheckSpecialValues<HalfModel>();
    CheckSpecialValues<BFloat16Model>();
  });
}

}  // namespace
}  // namespace kolo::kernels::reduce_testing
