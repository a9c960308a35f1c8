// Checks the float32 <-> float16/bfloat16 device casts against the CPU
// conversions of kernels/cpu/half.h, including subnormals, overflow,
// infinities and NaN. Needs a GPU (tag "gpu").
#include "kernels/cuda/cast.h"

#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/half.h"
#include "kernels/cuda/test_util.h"

namespace kolo::kernels::cuda {
namespace {

using testing::DeviceBytes;

std::vector<float> Inputs() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.5f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          1e30f,
                          -1e30f,
                          6e-8f,
                          3e-8f,
                          1e-40f,
                          1.0f / 3,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::nanf("")};
  std::mt19937 rng(7);
  for (int i = 0; i < 200001; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  return v;
}

class CastTest : public ::testing::TestWithParam<DType> {};

TEST_P(CastTest, NarrowAndWidenMatchTheCpu) {
  KOLO_REQUIRE_GPU();
  const DType half = GetParam();
  const std::vector<float> in = Inputs();
  const size_t n = in.size();
  DeviceBytes dev_in(n * 4), dev_half(n * 2 + 2), dev_back(n * 4);
  dev_in.Upload(in.data(), n * 4);
  // The 16-bit array starts at an odd element: unaligned for vectors.
  uint16_t* half_ptr = reinterpret_cast<uint16_t*>(dev_half.get()) + 1;
  ASSERT_EQ(
      NarrowFloat32Async(half, reinterpret_cast<const float*>(dev_in.get()), half_ptr, n, nullptr),
      0);
  ASSERT_EQ(
      WidenToFloat32Async(half, half_ptr, reinterpret_cast<float*>(dev_back.get()), n, nullptr), 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> got_half(n);
  std::vector<float> got_back(n);
  ASSERT_EQ(cudaMemcpy(got_half.data(), half_ptr, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  dev_back.Download(got_back.data(), n * 4);
  int failures = 0;
  for (size_t i = 0; i < n && failures < 5; ++i) {
    const uint16_t want = half == DType::kFloat16 ? FloatToHalf(in[i]) : FloatToBFloat16(in[i]);
    const float want_back = half == DType::kFloat16 ? HalfToFloat(want) : BFloat16ToFloat(want);
    const bool nan = std::isnan(in[i]);
    if (nan ? !std::isnan(got_back[i])
            : (want != got_half[i] || want_back != got_back[i] ||
               std::signbit(want_back) != std::signbit(got_back[i]))) {
      ADD_FAILURE() << DTypeName(half) << " element " << i << " input " << in[i] << " (0x"
                    << std::hex << std::bit_cast<uint32_t>(in[i]) << "): got 0x" << got_half[i]
                    << " want 0x" << want << std::dec;
      ++failures;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Both, CastTest, ::testing::Values(DType::kFloat16, DType::kBFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(CastArgumentsTest, RefusesOtherTypes) {
  EXPECT_NE(NarrowFloat32Async(DType::kFloat32, nullptr, nullptr, 1, nullptr), 0);
  EXPECT_NE(WidenToFloat32Async(DType::kInt32, nullptr, nullptr, 1, nullptr), 0);
}

}  // namespace
}  // namespace kolo::kernels::cuda
