#include "examples/fashion_mnist/data_shard.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace kolo::fashion_mnist {
namespace {

TEST(DataShardTest, PermutationIsDeterministicAndPerEpoch) {
  const std::vector<int64_t> a = EpochPermutation(1000, 7, 0);
  EXPECT_EQ(a, EpochPermutation(1000, 7, 0));
  EXPECT_NE(a, EpochPermutation(1000, 7, 1));
  EXPECT_NE(a, EpochPermutation(1000, 8, 0));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
}

TEST(DataShardTest, ShardsAreEqualSizedAndDisjoint) {
  constexpr int64_t kCount = 1003;
  constexpr int kSize = 4;
  std::set<int64_t> seen;
  for (int rank = 0; rank < kSize; ++rank) {
    const std::vector<int64_t> shard = ShardForEpoch(kCount, rank, kSize, 3, 2);
    EXPECT_EQ(shard.size(), static_cast<size_t>(kCount / kSize));
    for (int64_t i : shard) {
      EXPECT_TRUE(seen.insert(i).second) << "index " << i << " in two shards";
      EXPECT_GE(i, 0);
      EXPECT_LT(i, kCount);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kCount / kSize * kSize));
}

TEST(DataShardTest, OneRankGetsEverything) {
  EXPECT_EQ(ShardForEpoch(10, 0, 1, 5, 0), EpochPermutation(10, 5, 0));
}

TEST(DataShardTest, GatherScalesPixels) {
  Dataset data;
  data.count = 3;
  data.rows = 1;
  data.cols = 2;
  data.pixels = {0, 255, 51, 102, 10, 20};
  data.labels = {4, 5, 6};
  const std::vector<int64_t> indices = {2, 0};
  float x[4];
  uint8_t labels[2];
  GatherBatch(data, indices, x, labels);
  EXPECT_FLOAT_EQ(x[0], 10 / 255.0f);
  EXPECT_FLOAT_EQ(x[1], 20 / 255.0f);
  EXPECT_FLOAT_EQ(x[2], 0.0f);
  EXPECT_FLOAT_EQ(x[3], 1.0f);
  EXPECT_EQ(labels[0], 6);
  EXPECT_EQ(labels[1], 4);
}

}  // namespace
}  // namespace kolo::fashion_mnist
