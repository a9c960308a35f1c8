// Checks the K-way device reduction against kernels::Reduce for every
// element type and operator, odd sizes, unaligned pointers, in place and with
// scales. Needs a GPU (tag "gpu").
#include "kernels/cuda/reduce.h"

#include <cuda_runtime.h>

#include <random>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cuda/test_util.h"

namespace kolo::kernels::cuda {
namespace {

using testing::DeviceBytes;
using testing::ExpectSameElements;
using testing::RandomElements;

struct Case {
  int sources;
  uint64_t count;
  uint64_t misalign;  // elements added to every pointer
  bool in_place;      // dst is source 0
  double prescale;
  double postscale;
};

void CheckReduce(DType dtype, ReduceOp op, const Case& c, uint64_t seed) {
  const size_t esize = DTypeSize(dtype);
  if (!Scalable(dtype) && (c.prescale != 1.0 || c.postscale != 1.0)) {
    // Refused before any launch, as the CPU kernel refuses it.
    std::vector<uint8_t> in(c.count * esize), out(c.count * esize);
    const void* srcs[] = {in.data()};
    void* dsts[] = {out.data()};
    EXPECT_EQ(
        ReduceAsync(dtype, op, srcs, 1, out.data(), c.count, c.prescale, c.postscale, nullptr),
        cudaErrorInvalidValue);
    EXPECT_EQ(Reduce(dtype, op, srcs, dsts, c.count, c.prescale, c.postscale).code(),
              absl::StatusCode::kInvalidArgument);
    return;
  }
  std::mt19937_64 rng(seed);
  const bool floating = IsFloatingPoint(dtype);
  std::vector<std::vector<uint8_t>> host(c.sources);
  std::vector<DeviceBytes> dev;
  std::vector<const void*> dev_ptrs, host_ptrs;
  const size_t bytes = c.count * esize;
  for (int s = 0; s < c.sources; ++s) {
    host[s] = RandomElements(dtype, c.count, rng, /*with_nan=*/floating && op != ReduceOp::kProduct,
                             /*small_ints=*/false);
    dev.emplace_back(bytes + c.misalign * esize);
    dev.back().Upload(host[s].data(), bytes, c.misalign * esize);
    dev_ptrs.push_back(dev.back().get() + c.misalign * esize);
    host_ptrs.push_back(host[s].data());
  }
  DeviceBytes out(bytes + c.misalign * esize);
  void* dst = c.in_place ? const_cast<void*>(dev_ptrs[0]) : out.get() + c.misalign * esize;
  ASSERT_EQ(ReduceAsync(dtype, op, dev_ptrs.data(), c.sources, dst, c.count, c.prescale,
                        c.postscale, nullptr),
            0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> got(bytes);
  ASSERT_EQ(cudaMemcpy(got.data(), dst, bytes, cudaMemcpyDeviceToHost), cudaSuccess);

  std::vector<uint8_t> want(bytes);
  void* want_ptr = want.data();
  ASSERT_TRUE(
      Reduce(dtype, op, host_ptrs, absl::MakeSpan(&want_ptr, 1), c.count, c.prescale, c.postscale)
          .ok());
  ExpectSameElements(
      dtype, want, got,
      absl::StrCat(DTypeName(dtype), " ", ReduceOpName(op), " of ", c.sources, " x ", c.count,
                   " misaligned by ", c.misalign, c.in_place ? " in place" : "", " pre ",
                   c.prescale, " post ", c.postscale));
}

class ReduceTest : public ::testing::TestWithParam<std::tuple<DType, ReduceOp>> {};

TEST_P(ReduceTest, MatchesCpuReference) {
  KOLO_REQUIRE_GPU();
  const auto [dtype, op] = GetParam();
  const Case cases[] = {
      {1, 1, 0, false, 1.0, 1.0},           {2, 1000003, 0, false, 1.0, 1.0},
      {3, 4099, 1, false, 1.0, 1.0},        {8, 65537, 0, true, 1.0, 1.0},
      {4, 123457, 3, true, 0.5, 1.0},       {2, 77, 0, false, 1.0, 0.125},
      {5, 1 << 18, 0, false, 1.0 / 3, 3.0}, {kMaxReduceSources, 999, 1, false, 1.0, 1.0},
      {1, 4099, 1, true, 1.0, 1.0},  // one source in place (bool: its bytes become 0 or 1)
  };
  uint64_t seed = 10;
  for (const Case& c : cases) CheckReduce(dtype, op, c, ++seed);
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kAllDTypes),
                                            ::testing::Values(ReduceOp::kSum, ReduceOp::kMin,
                                                              ReduceOp::kMax, ReduceOp::kProduct)),
                         [](const auto& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               ReduceOpName(std::get<1>(info.param)));
                         });

TEST(ReduceArgumentsTest, RefusesBadArguments) {
  const void* srcs[1] = {nullptr};
  EXPECT_NE(ReduceAsync(DType::kFloat32, ReduceOp::kSum, srcs, 0, nullptr, 1, 1, 1, nullptr), 0);
  EXPECT_NE(ReduceAsync(DType::kFloat32, ReduceOp::kSum, srcs, kMaxReduceSources + 1, nullptr, 1, 1,
                        1, nullptr),
            0);
  EXPECT_NE(ReduceAsync(DType::kFloat32, ReduceOp::kSum, srcs, 1, nullptr, 1, 1, 1, nullptr), 0);
}

}  // namespace
}  // namespace kolo::kernels::cuda
