#include "examples/fashion_mnist/data_shard.h"

#include <cassert>
#include <numeric>
#include <random>
#include <utility>

namespace kolo::fashion_mnist {
namespace {

// Uniform in [0, bound) by rejection, so no value is favoured.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t r;
  do {
    r = rng();
  } while (r >= limit);
  return r % bound;
}

}  // namespace

std::vector<int64_t> EpochPermutation(int64_t count, uint64_t seed, int epoch) {
  std::vector<int64_t> perm(count);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  // Distinct, well-mixed streams per epoch from one seed.
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(epoch)};
  std::mt19937_64 rng(seq);
  for (int64_t i = count - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(UniformBelow(rng, i + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

std::vector<int64_t> ShardForEpoch(int64_t count, int rank, int size, uint64_t seed, int epoch) {
  assert(rank >= 0 && rank < size);
  const std::vector<int64_t> perm = EpochPermutation(count, seed, epoch);
  const int64_t per_rank = count / size;
  std::vector<int64_t> shard;
  shard.reserve(per_rank);
  for (int64_t i = 0; i < per_rank; ++i) {
    shard.push_back(perm[i * size + rank]);
  }
  return shard;
}

void GatherBatch(const Dataset& data, std::span<const int64_t> indices, float* x, uint8_t* labels) {
  const int64_t ppi = data.pixels_per_image();
  constexpr float kScale = 1.0f / 255.0f;
  for (size_t b = 0; b < indices.size(); ++b) {
    const int64_t idx = indices[b];
    assert(idx >= 0 && idx < data.count);
    const uint8_t* src = data.pixels.data() + idx * ppi;
    float* dst = x + static_cast<int64_t>(b) * ppi;
    for (int64_t k = 0; k < ppi; ++k) dst[k] = src[k] * kScale;
    labels[b] = data.labels[idx];
  }
}

}  // namespace kolo::fashion_mnist
