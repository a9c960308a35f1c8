#include "common/rank_ranges.h"

#include "gtest/gtest.h"

namespace kolo {
namespace {

TEST(RankRangesTest, CompressesRuns) {
  EXPECT_EQ(FormatRankRanges({}), "");
  EXPECT_EQ(FormatRankRanges({3}), "3");
  EXPECT_EQ(FormatRankRanges({3, 7}), "3,7");
  EXPECT_EQ(FormatRankRanges({0, 1, 2, 4, 5, 6}), "0-2,4-6");
  EXPECT_EQ(FormatRankRanges({0, 1, 3, 5, 6}), "0-1,3,5-6");
}

}  // namespace
}  // namespace kolo
