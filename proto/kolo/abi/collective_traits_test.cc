#include "proto/kolo/abi/collective_traits.h"

#include <cstdint>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace kolo {
namespace {

// The wire codes are ABI v1: a client and kolod built apart must agree.
static_assert(static_cast<uint32_t>(CollectiveKind::kAllreduce) == 1);
static_assert(static_cast<uint32_t>(CollectiveKind::kRemoveProcessSet) == 9);
static_assert(kMaxCollectiveKind == 9);

TEST(CollectiveTraitsTest, EveryKindHasItsRowAndADistinctName) {
  std::set<std::string> names;
  for (uint32_t code = 1; code <= kMaxCollectiveKind; ++code) {
    const auto kind = static_cast<CollectiveKind>(code);
    ASSERT_TRUE(IsCollectiveKind(code));
    const CollectiveTraits& t = Traits(kind);
    EXPECT_EQ(t.kind, kind) << code;
    EXPECT_STRNE(t.name, "invalid-collective") << code;
    EXPECT_STREQ(CollectiveKindName(kind), t.name);
    names.insert(t.name);
  }
  EXPECT_EQ(names.size(), kMaxCollectiveKind);
}

TEST(CollectiveTraitsTest, ValuesOutsideTheEnumHaveNoTraits) {
  for (uint32_t code : {0u, kMaxCollectiveKind + 1, 0xffffffffu}) {
    EXPECT_FALSE(IsCollectiveKind(code));
    const CollectiveTraits& t = Traits(static_cast<CollectiveKind>(code));
    EXPECT_STREQ(t.name, "invalid-collective");
    EXPECT_FALSE(t.tensor || t.control || t.returns_result || t.fuses || t.runs_with_joined ||
                 t.takes_aux || t.device);
  }
}

// Rules that follow from what the traits mean: a row that breaks one is a
// mistake in the table, whatever its kind.
TEST(CollectiveTraitsTest, EveryRowIsConsistent) {
  for (uint32_t code = 1; code <= kMaxCollectiveKind; ++code) {
    const CollectiveTraits& t = Traits(static_cast<CollectiveKind>(code));
    SCOPED_TRACE(t.name);
    EXPECT_FALSE(t.tensor && t.control);
    EXPECT_TRUE(!(t.set_change) || (t.control));
    // A control op completes in the job: nothing for a backend, fusion or a
    // device.
    EXPECT_TRUE(!t.control ||
                !(t.fuses || t.groups || t.device || t.runs_with_joined || t.returns_result));
    if (t.returns_result || t.reduces || t.rooted || t.splits || t.in_place || t.device) {
      EXPECT_TRUE(t.tensor);
    }
    // A new tensor is sized from the rows of its first dimension.
    EXPECT_TRUE(!(t.returns_result || t.per_rank_rows) || (t.needs_first_dim));
    // Rows that differ per rank make a layout of their own.
    EXPECT_TRUE(!(t.per_rank_rows) || !(t.fuses));
    EXPECT_FALSE(t.in_place && t.returns_result);
    EXPECT_TRUE(!(t.splits) || (t.takes_aux && t.per_rank_rows));
    EXPECT_TRUE(!(t.compresses) || (t.reduces));
    EXPECT_FALSE(t.reduces && t.rooted);
  }
}

// What Kolo's users rely on, kind by kind (Horovod's semantics).
TEST(CollectiveTraitsTest, TheKindsUsersKnow) {
  EXPECT_TRUE(Traits(CollectiveKind::kAllreduce).compresses);
  EXPECT_TRUE(Traits(CollectiveKind::kBroadcast).rooted);
  EXPECT_TRUE(HasPerRankRows(CollectiveKind::kAllgather));
  EXPECT_TRUE(Traits(CollectiveKind::kAlltoall).splits);
  EXPECT_TRUE(ReturnsResult(CollectiveKind::kReducescatter));
  EXPECT_FALSE(HasPerRankRows(CollectiveKind::kReducescatter));
  // Only allreduce and barrier may run while ranks have joined; a broadcast
  // fails on the ranks that did not join, as in Horovod.
  std::set<std::string> with_joined;
  for (const CollectiveTraits& t : kCollectiveTraits) {
    if (t.runs_with_joined) with_joined.insert(t.name);
  }
  EXPECT_EQ(with_joined, (std::set<std::string>{"allreduce", "barrier"}));
  EXPECT_EQ(KindsWith(&CollectiveTraits::runs_with_joined), "allreduce and barrier");
  EXPECT_TRUE(IsControl(CollectiveKind::kJoin));
  EXPECT_FALSE(IsSetChange(CollectiveKind::kJoin));
  EXPECT_TRUE(IsSetChange(CollectiveKind::kAddProcessSet));
  EXPECT_TRUE(IsSetChange(CollectiveKind::kRemoveProcessSet));
  EXPECT_FALSE(IsControl(CollectiveKind::kBarrier));
  EXPECT_FALSE(Traits(CollectiveKind::kBarrier).tensor);
}

}  // namespace
}  // namespace kolo
