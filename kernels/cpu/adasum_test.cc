#include "kernels/cpu/adasum.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/half.h"

namespace kolo::kernels {
namespace {

TEST(AdasumKernelTest, OrthogonalTensorsAdd) {
  const std::vector<double> a = {1, 0, 0}, b = {0, 2, 0};
  AdasumProducts p;
  ASSERT_TRUE(AdasumAccumulate(DType::kFloat64, a.data(), b.data(), 3, &p).ok());
  EXPECT_EQ(p.dot, 0);
  EXPECT_EQ(p.a_norm_sq, 1);
  EXPECT_EQ(p.b_norm_sq, 4);
  const AdasumCoefficients c = AdasumCoefficientsOf(p);
  EXPECT_EQ(c.a, 1);
  EXPECT_EQ(c.b, 1);
  std::vector<double> out(3);
  ASSERT_TRUE(AdasumCombine(DType::kFloat64, a.data(), b.data(), out.data(), 3, c).ok());
  EXPECT_EQ(out, (std::vector<double>{1, 2, 0}));
}

TEST(AdasumKernelTest, EqualTensorsAverage) {
  // a == b: each coefficient is 1 - |a|^2 / (2 |a|^2) = 1/2.
  std::vector<float> a = {3, -4, 5}, b = a;
  AdasumProducts p;
  ASSERT_TRUE(AdasumAccumulate(DType::kFloat32, a.data(), b.data(), 3, &p).ok());
  const AdasumCoefficients c = AdasumCoefficientsOf(p);
  EXPECT_DOUBLE_EQ(c.a, 0.5);
  EXPECT_DOUBLE_EQ(c.b, 0.5);
  ASSERT_TRUE(AdasumCombine(DType::kFloat32, a.data(), b.data(), a.data(), 3, c).ok());
  EXPECT_EQ(a, b);
}

TEST(AdasumKernelTest, ZeroTensorLeavesTheOther) {
  const std::vector<float> a = {0, 0}, b = {1.5f, -2};
  AdasumProducts p;
  ASSERT_TRUE(AdasumAccumulate(DType::kFloat32, a.data(), b.data(), 2, &p).ok());
  std::vector<float> out(2);
  ASSERT_TRUE(AdasumCombine(DType::kFloat32, a.data(), b.data(), out.data(), 2,
                            AdasumCoefficientsOf(p))
                  .ok());
  EXPECT_EQ(out, b);
}

TEST(AdasumKernelTest, ProductsOfPiecesAddUpToTheWhole) {
  std::vector<double> a(101), b(101);
  for (int i = 0; i < 101; ++i) {
    a[i] = std::sin(i);
    b[i] = std::cos(0.5 * i);
  }
  AdasumProducts whole, pieces;
  ASSERT_TRUE(AdasumAccumulate(DType::kFloat64, a.data(), b.data(), 101, &whole).ok());
  ASSERT_TRUE(AdasumAccumulate(DType::kFloat64, a.data(), b.data(), 40, &pieces).ok());
  ASSERT_TRUE(AdasumAccumulate(DType::kFloat64, a.data() + 40, b.data() + 40, 61, &pieces).ok());
  EXPECT_NEAR(whole.dot, pieces.dot, 1e-12);
  EXPECT_NEAR(whole.a_norm_sq, pieces.a_norm_sq, 1e-12);
  EXPECT_NEAR(whole.b_norm_sq, pieces.b_norm_sq, 1e-12);
}

TEST(AdasumKernelTest, HalfFormatsComputeWide) {
  // 1 + 1 in float16 with coefficients from the exact products: the pair of
  // equal tensors gives the tensor back, bit for bit.
  std::vector<uint16_t> a = {FloatToHalf(1.0f), FloatToHalf(-0.5f)};
  std::vector<uint16_t> b = a, out(2);
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    if (t == DType::kBFloat16) a = b = {FloatToBFloat16(1.0f), FloatToBFloat16(-0.5f)};
    AdasumProducts p;
    ASSERT_TRUE(AdasumAccumulate(t, a.data(), b.data(), 2, &p).ok());
    EXPECT_DOUBLE_EQ(p.dot, 1.25);
    ASSERT_TRUE(AdasumCombine(t, a.data(), b.data(), out.data(), 2, AdasumCoefficientsOf(p)).ok());
    EXPECT_EQ(out, a);
  }
}

TEST(AdasumKernelTest, ScaleAndRefusals) {
  std::vector<float> x = {2, -6};
  ASSERT_TRUE(AdasumScale(DType::kFloat32, x.data(), 2, 0.5).ok());
  EXPECT_EQ(x, (std::vector<float>{1, -3}));
  int32_t i[2] = {1, 2};
  AdasumProducts p;
  const absl::Status s = AdasumAccumulate(DType::kInt32, i, i, 2, &p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("floating-point"), absl::string_view::npos) << s.message();
  EXPECT_FALSE(AdasumCombine(DType::kBool, i, i, i, 2, {}).ok());
  EXPECT_FALSE(AdasumScale(DType::kInt8, i, 2, 1.0).ok());
}

}  // namespace
}  // namespace kolo::kernels
