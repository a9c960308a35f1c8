#include "examples/bench/perf_stats.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::bench {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(SweepSizesTest, DoublesFromMinToMaxInclusive) {
  EXPECT_THAT(SweepSizes(4, 64, 4), ElementsAre(4, 8, 16, 32, 64));
  const std::vector<uint64_t> full = SweepSizes(4, uint64_t{256} << 20, 4);
  EXPECT_EQ(full.size(), 27u);
  EXPECT_EQ(full.front(), 4u);
  EXPECT_EQ(full.back(), uint64_t{256} << 20);
}

TEST(SweepSizesTest, RoundsToWholeElements) {
  EXPECT_THAT(SweepSizes(1, 16, 4), ElementsAre(4, 8, 16));
  EXPECT_THAT(SweepSizes(6, 30, 4), ElementsAre(4, 12, 24));
  EXPECT_THAT(SweepSizes(8, 8, 4), ElementsAre(8));
  EXPECT_THAT(SweepSizes(16, 8, 4), IsEmpty());
}

TEST(StatsTest, MedianAndPercentiles) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  std::vector<double> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);
  EXPECT_DOUBLE_EQ(Percentile(hundred, 0.5), 50);
  EXPECT_DOUBLE_EQ(Percentile(hundred, 0.9), 90);
  EXPECT_DOUBLE_EQ(Percentile(hundred, 0.99), 99);
  EXPECT_DOUBLE_EQ(Percentile(hundred, 1.0), 100);
  EXPECT_DOUBLE_EQ(Percentile({7}, 0.99), 7);
}

TEST(BandwidthTest, BusBandwidthScalesWithRanks) {
  const Bandwidth two = AllreduceBandwidth(1'000'000'000, 1.0, 2);
  EXPECT_DOUBLE_EQ(two.algbw_gbps, 1.0);
  EXPECT_DOUBLE_EQ(two.busbw_gbps, 1.0);
  const Bandwidth four = AllreduceBandwidth(2'000'000'000, 0.5, 4);
  EXPECT_DOUBLE_EQ(four.algbw_gbps, 4.0);
  EXPECT_DOUBLE_EQ(four.busbw_gbps, 6.0);
  EXPECT_DOUBLE_EQ(AllreduceBandwidth(100, 1.0, 1).busbw_gbps, 0.0);
}

TEST(ParseReduceOpTest, KnowsTheOps) {
  EXPECT_EQ(*ParseReduceOp("sum"), ReduceOp::kSum);
  EXPECT_EQ(*ParseReduceOp("avg"), ReduceOp::kAverage);
  EXPECT_EQ(*ParseReduceOp("prod"), ReduceOp::kProduct);
  EXPECT_FALSE(ParseReduceOp("xor").ok());
}

// Simulates the reduction the daemon does, in float32 and in rank order, and
// in reverse order: both must match ExpectedValue exactly.
TEST(TestDataTest, ReductionsAreExactInAnyOrder) {
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct, ReduceOp::kAverage}) {
    for (int ranks : {1, 2, 3, 8, 17}) {
      const uint64_t count = 1000;
      std::vector<float> forward(count), backward(count), in(count);
      FillInput(op, 0, forward.data(), count);
      FillInput(op, ranks - 1, backward.data(), count);
      for (int r = 1; r < ranks; ++r) {
        for (int dir = 0; dir < 2; ++dir) {
          std::vector<float>& acc = dir == 0 ? forward : backward;
          FillInput(op, dir == 0 ? r : ranks - 1 - r, in.data(), count);
          for (uint64_t i = 0; i < count; ++i) {
            switch (op) {
              case ReduceOp::kMin:
                acc[i] = std::min(acc[i], in[i]);
                break;
              case ReduceOp::kMax:
                acc[i] = std::max(acc[i], in[i]);
                break;
              case ReduceOp::kProduct:
                acc[i] *= in[i];
                break;
              default:
                acc[i] += in[i];
                break;
            }
          }
        }
      }
      if (op == ReduceOp::kAverage) {
        for (uint64_t i = 0; i < count; ++i) {
          forward[i] /= static_cast<float>(ranks);
          backward[i] /= static_cast<float>(ranks);
        }
      }
      EXPECT_EQ(CountMismatches(op, ranks, forward.data(), count), 0u)
          << ReduceOpName(op) << " ranks=" << ranks;
      EXPECT_EQ(CountMismatches(op, ranks, backward.data(), count), 0u)
          << ReduceOpName(op) << " ranks=" << ranks;
    }
  }
}

TEST(TestDataTest, DetectsAWrongElement) {
  std::vector<float> data(100);
  for (uint64_t i = 0; i < data.size(); ++i) {
    data[i] = ExpectedValue(ReduceOp::kSum, 4, i);
  }
  EXPECT_EQ(CountMismatches(ReduceOp::kSum, 4, data.data(), data.size()), 0u);
  data[17] += 1;
  EXPECT_EQ(CountMismatches(ReduceOp::kSum, 4, data.data(), data.size()), 1u);
  // Values differ between ranks, so a rank that reduced only itself fails.
  FillInput(ReduceOp::kSum, 0, data.data(), data.size());
  EXPECT_GT(CountMismatches(ReduceOp::kSum, 4, data.data(), data.size()), 50u);
}

TEST(TableTest, CsvAndFixedColumns) {
  const SweepRow row{.bytes = 1024,
                     .count = 256,
                     .time_us = 12.5,
                     .bw = {.algbw_gbps = 0.08192, .busbw_gbps = 0.08192},
                     .wrong = 0};
  EXPECT_EQ(SweepLine(row, true), "1024,256,12.500,0.0819,0.0819,0\n");
  EXPECT_EQ(SweepHeader(true), "size_bytes,count,time_us,algbw_gbps,busbw_gbps,wrong\n");
  EXPECT_EQ(SweepLine(row, false),
            "        1024          256       12.50       0.082       0.082       OK\n");
  const LatencyRow lat{.bytes = 8, .iters = 100, .p50_us = 5, .p90_us = 6, .p99_us = 9, .wrong = 2};
  EXPECT_EQ(LatencyLine(lat, true), "8,100,5.000,6.000,9.000,2\n");
  EXPECT_THAT(LatencyLine(lat, false), ::testing::HasSubstr("FAIL(2)"));
}

}  // namespace
}  // namespace kolo::bench
