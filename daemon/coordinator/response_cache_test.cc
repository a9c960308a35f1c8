#include "daemon/coordinator/response_cache.h"

#include <vector>

#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

kolo::v1::TensorMeta MetaOf(const std::string& name, int joined = 0) {
  kolo::v1::TensorMeta m;
  m.set_name(name);
  m.set_joined(joined);
  m.set_local_error(joined > 0 ? "x" : "");
  return m;
}

TEST(ResponseCacheTest, ARoundCompletesWhenEveryExpectedNodeReportedItsBit) {
  ResponseCache cache(4);
  std::optional<uint32_t> id = cache.Assign("0:a", MetaOf("a", 2), /*nodes=*/3, /*expected=*/2);
  ASSERT_EQ(id, 0u);
  EXPECT_EQ(cache.Find("0:a"), 0u);
  EXPECT_FALSE(cache.Find("0:b").has_value());
  EXPECT_EQ(cache.meta(0).joined(), 0) << "a bit stands for the metadata alone";
  EXPECT_TRUE(cache.meta(0).local_error().empty());

  EXPECT_FALSE(cache.any_counted());
  EXPECT_FALSE(cache.Count(0, 2));
  EXPECT_TRUE(cache.any_counted());
  EXPECT_FALSE(cache.Count(0, 2)) << "a second bit of one node counts nothing";
  EXPECT_TRUE(cache.Count(0, 0));
  EXPECT_FALSE(cache.any_counted()) << "the round starts over";
  EXPECT_FALSE(cache.Count(0, 0));
}

TEST(ResponseCacheTest, SpillReturnsTheNodesThatReportedAndEndsTheRound) {
  ResponseCache cache(4);
  ASSERT_TRUE(cache.Assign("0:a", MetaOf("a"), 3, 3).has_value());
  EXPECT_TRUE(cache.Spill(0).empty());
  cache.Count(0, 1);
  cache.Count(0, 2);
  EXPECT_EQ(cache.Spill(0), std::vector<int>({1, 2}));
  EXPECT_FALSE(cache.any_counted());
  EXPECT_TRUE(cache.Spill(0).empty());
}

TEST(ResponseCacheTest, AFullCacheAssignsNothing) {
  ResponseCache cache(1);
  ASSERT_TRUE(cache.Assign("0:a", MetaOf("a"), 2, 2).has_value());
  EXPECT_FALSE(cache.Assign("0:b", MetaOf("b"), 2, 2).has_value());
  EXPECT_FALSE(cache.Assign("0:a", MetaOf("a"), 2, 2).has_value()) << "already cached";
  EXPECT_EQ(cache.size(), 1u);
}

}  // namespace
}  // namespace kolo::daemon
