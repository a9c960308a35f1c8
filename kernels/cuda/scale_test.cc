// Checks in-place device scaling against kernels::ScaleCopy for every
// element type (integers saturate, 16-bit floats round once). Needs a GPU
// (tag "gpu").
#include "kernels/cuda/scale.h"

#include <cuda_runtime.h>

#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cuda/test_util.h"

namespace kolo::kernels::cuda {
namespace {

using testing::DeviceBytes;

class ScaleTest : public ::testing::TestWithParam<DType> {};

TEST_P(ScaleTest, MatchesCpuReference) {
  KOLO_REQUIRE_GPU();
  const DType dtype = GetParam();
  const size_t esize = DTypeSize(dtype);
  std::mt19937_64 rng(5);
  for (const double factor : {1.0, 0.5, -3.0, 1e10, 1.0 / 7}) {
    for (const size_t count : {size_t{1}, size_t{4097}, size_t{(1 << 20) + 3}}) {
      std::vector<uint8_t> host = testing::RandomElements(dtype, count, rng, true);
      DeviceBytes dev(host.size() + esize);
      dev.Upload(host.data(), host.size(), esize);  // one element in: unaligned
      if (!Scalable(dtype) && factor != 1.0) {
        // bool takes no scale factor: refused, as ScaleCopy refuses it.
        EXPECT_EQ(ScaleAsync(dtype, dev.get() + esize, count, factor, nullptr),
                  cudaErrorInvalidValue);
        void* dst = host.data();
        EXPECT_EQ(ScaleCopy(dtype, host.data(), absl::MakeSpan(&dst, 1), count, factor).code(),
                  absl::StatusCode::kInvalidArgument);
        continue;
      }
      ASSERT_EQ(ScaleAsync(dtype, dev.get() + esize, count, factor, nullptr), 0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<uint8_t> got(host.size()), want(host.size());
      dev.Download(got.data(), got.size(), esize);
      void* dst = want.data();
      ASSERT_TRUE(ScaleCopy(dtype, host.data(), absl::MakeSpan(&dst, 1), count, factor).ok());
      testing::ExpectSameElements(dtype, want, got,
                                  absl::StrCat(DTypeName(dtype), " x ", factor, " n=", count));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ScaleTest, ::testing::ValuesIn(testing::kAllDTypes),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace kolo::kernels::cuda
