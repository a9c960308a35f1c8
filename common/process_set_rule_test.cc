#include "common/process_set_rule.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace kolo {
namespace {

TEST(ProcessSetRuleTest, AcceptsDistinctAscendingRanksOfTheJob) {
  EXPECT_TRUE(CheckProcessSetRanks(std::vector<int64_t>{0}, 1).ok());
  EXPECT_TRUE(CheckProcessSetRanks(std::vector<int64_t>{0, 2, 3}, 4).ok());
}

TEST(ProcessSetRuleTest, RefusesEachBreakWithOneCodeAndMessage) {
  struct Case {
    std::vector<int64_t> ranks;
    const char* message;
  };
  const Case cases[] = {
      {{}, "add_process_set: no ranks given"},
      {{-1}, "add_process_set: ranks must be distinct, ascending and in [0, 4); got -1 at position 0"},
      {{0, 4}, "add_process_set: ranks must be distinct, ascending and in [0, 4); got 4 at position 1"},
      {{1, 1}, "add_process_set: ranks must be distinct, ascending and in [0, 4); got 1 at position 1"},
      {{2, 1}, "add_process_set: ranks must be distinct, ascending and in [0, 4); got 1 at position 1"},
      {{0, INT64_MAX}, "add_process_set: ranks must be distinct, ascending and in [0, 4); got "
                       "9223372036854775807 at position 1"},
  };
  for (const Case& c : cases) {
    const absl::Status s = CheckProcessSetRanks(c.ranks, 4);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), c.message);
  }
}

}  // namespace
}  // namespace kolo
