// Checks the batched pack/unpack kernel against kernels::ScaleCopy on random
// tensors of odd sizes at unaligned offsets, for every element type, with and
// without scaling. Needs a GPU (tag "gpu").
#include "kernels/cuda/batched_copy.h"

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
using testing::ExpectSameElements;
using testing::RandomElements;

// Packs tensors of `counts` elements from separate allocations (each at an
// element-aligned but otherwise arbitrary offset) into one buffer at
// `offsets`, then unpacks them to fresh outputs; compares both steps with
// the CPU reference.
void PackUnpackRoundTrip(DType dtype, const std::vector<uint64_t>& counts, double prescale,
                         double postscale, uint64_t seed) {
  const size_t esize = DTypeSize(dtype);
  std::mt19937_64 rng(seed);
  const size_t n = counts.size();
  std::vector<uint64_t> in_offsets(n), fused_offsets(n);
  uint64_t fused_bytes = esize * (rng() % 5);  // an unaligned start
  for (size_t i = 0; i < n; ++i) {
    in_offsets[i] = esize * (rng() % 9);
    fused_offsets[i] = fused_bytes;
    fused_bytes += counts[i] * esize + esize * (rng() % 3);
  }
  std::vector<std::vector<uint8_t>> host_in(n);
  std::vector<DeviceBytes> dev_in, dev_out;
  for (size_t i = 0; i < n; ++i) {
    host_in[i] = RandomElements(dtype, counts[i], rng, /*with_nan=*/true);
    dev_in.emplace_back(in_offsets[i] + host_in[i].size());
    dev_in.back().Upload(host_in[i].data(), host_in[i].size(), in_offsets[i]);
    dev_out.emplace_back(in_offsets[i] + host_in[i].size());
  }
  DeviceBytes fused(fused_bytes);
  ASSERT_EQ(cudaMemset(fused.get(), 0, fused_bytes), cudaSuccess);

  std::vector<CopySegment> pack(n), unpack(n);
  for (size_t i = 0; i < n; ++i) {
    pack[i] = {reinterpret_cast<uint64_t>(dev_in[i].get() + in_offsets[i]),
               reinterpret_cast<uint64_t>(fused.get() + fused_offsets[i]), counts[i], 0};
    unpack[i] = {pack[i].dst, reinterpret_cast<uint64_t>(dev_out[i].get() + in_offsets[i]),
                 counts[i], 0};
  }
  const uint64_t pack_chunks = AssignCopyChunks(dtype, pack.data(), n);
  const uint64_t unpack_chunks = AssignCopyChunks(dtype, unpack.data(), n);
  DeviceBytes pack_desc(n * sizeof(CopySegment)), unpack_desc(n * sizeof(CopySegment));
  pack_desc.Upload(pack.data(), n * sizeof(CopySegment));
  unpack_desc.Upload(unpack.data(), n * sizeof(CopySegment));

  if (!Scalable(dtype) && (prescale != 1.0 || postscale != 1.0)) {
    // bool takes no scale factor: refused, as ScaleCopy refuses it.
    const double scale = prescale != 1.0 ? prescale : postscale;
    EXPECT_EQ(BatchedCopyAsync(dtype, reinterpret_cast<const CopySegment*>(pack_desc.get()),
                               static_cast<uint32_t>(n), pack_chunks, scale, nullptr),
              cudaErrorInvalidValue);
    std::vector<uint8_t> host_out(host_in.front().size());
    void* dst = host_out.data();
    EXPECT_EQ(
        ScaleCopy(dtype, host_in.front().data(), absl::MakeSpan(&dst, 1), counts.front(), scale)
            .code(),
        absl::StatusCode::kInvalidArgument);
    return;
  }
  ASSERT_EQ(BatchedCopyAsync(dtype, reinterpret_cast<const CopySegment*>(pack_desc.get()),
                             static_cast<uint32_t>(n), pack_chunks, prescale, nullptr),
            0);
  ASSERT_EQ(BatchedCopyAsync(dtype, reinterpret_cast<const CopySegment*>(unpack_desc.get()),
                             static_cast<uint32_t>(n), unpack_chunks, postscale, nullptr),
            0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  for (size_t i = 0; i < n; ++i) {
    const std::string what = absl::StrCat(DTypeName(dtype), " tensor ", i, " of ", counts[i],
                                          " at fused offset ", fused_offsets[i]);
    std::vector<uint8_t> want_packed(host_in[i].size());
    void* dst = want_packed.data();
    ASSERT_TRUE(
        ScaleCopy(dtype, host_in[i].data(), absl::MakeSpan(&dst, 1), counts[i], prescale).ok());
    std::vector<uint8_t> got_packed(host_in[i].size());
    fused.Download(got_packed.data(), got_packed.size(), fused_offsets[i]);
    ExpectSameElements(dtype, want_packed, got_packed, "pack " + what);

    std::vector<uint8_t> want_out(host_in[i].size());
    dst = want_out.data();
    ASSERT_TRUE(
        ScaleCopy(dtype, want_packed.data(), absl::MakeSpan(&dst, 1), counts[i], postscale).ok());
    std::vector<uint8_t> got_out(host_in[i].size());
    dev_out[i].Download(got_out.data(), got_out.size(), in_offsets[i]);
    ExpectSameElements(dtype, want_out, got_out, "unpack " + what);
  }
}

class BatchedCopyTest : public ::testing::TestWithParam<DType> {};

TEST_P(BatchedCopyTest, PlainCopyOfOddSizesAtUnalignedOffsets) {
  KOLO_REQUIRE_GPU();
  PackUnpackRoundTrip(GetParam(), {1, 3, 0, 4097, 17, 100003, 2, 65536 + 5}, 1.0, 1.0, 1);
}

TEST_P(BatchedCopyTest, ScalesOnPackAndUnpack) {
  KOLO_REQUIRE_GPU();
  PackUnpackRoundTrip(GetParam(), {7, 1 << 20, 31, 8191}, 0.5, 3.0, 2);
  PackUnpackRoundTrip(GetParam(), {12345, 1}, 1.0 / 3.0, 1.0, 3);
}

TEST_P(BatchedCopyTest, ManySmallTensorsAndOneLargeInOneLaunch) {
  KOLO_REQUIRE_GPU();
  std::vector<uint64_t> counts(500);
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = 1 + (i * 37) % 300;
  counts[250] = 3 << 20;
  PackUnpackRoundTrip(GetParam(), counts, 2.0, 0.25, 4);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, BatchedCopyTest, ::testing::ValuesIn(testing::kAllDTypes),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace kolo::kernels::cuda
