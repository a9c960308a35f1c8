#include "daemon/negotiation/plan_check.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

// This node hosts `ranks` of a job; each submitted `name` with `rows` rows
// of 4 bytes, alltoall sending `splits` (empty: even).
ReadySet Parked(CollectiveKind kind, const std::vector<int>& ranks, int64_t rows,
                std::vector<int64_t> splits = {}) {
  ReadySet set;
  set.name = "t";
  for (int r : ranks) {
    Request q;
    q.rank = r;
    q.kind = kind;
    q.dtype = DType::kFloat32;
    q.shape = {rows};
    q.bytes = static_cast<uint64_t>(rows) * 4;
    q.aux = splits;
    set.requests.push_back(q);
  }
  return set;
}

PlannedEntry Entry(std::vector<int64_t> rows, std::vector<int64_t> splits) {
  PlannedEntry e;
  e.names = {"0:t"};
  e.rows = std::move(rows);
  e.splits = std::move(splits);
  return e;
}

TEST(PlanCheckTest, AlltoallSplitsAsSubmittedPass) {
  // Rank 1 of 2 (on this node) sends 1 row to rank 0 and 2 to itself.
  std::vector<ReadySet> sets;
  sets.push_back(Parked(CollectiveKind::kAlltoall, {1}, 3, {1, 2}));
  EXPECT_TRUE(CheckPlannedEntry(Entry({}, {2, 2, 1, 2}), sets, 2, nullptr, 2).ok());
}

TEST(PlanCheckTest, AlltoallSplitsPastTheBufferAreRefused) {
  std::vector<ReadySet> sets;
  sets.push_back(Parked(CollectiveKind::kAlltoall, {1}, 3, {1, 2}));
  // More rows than rank 1 holds.
  absl::Status s = CheckPlannedEntry(Entry({}, {2, 2, 1, 900}), sets, 2, nullptr, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(
      s.message(),
      "alltoall \"t\": the plan has rank 1 send 900 rows to rank 1; it asked to send 2"))
      << s;
  // Values chosen so that their byte counts wrap around 2^64 to the right sum.
  s = CheckPlannedEntry(Entry({}, {2, 2, int64_t{1} << 62, 2}), sets, 2, nullptr, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // A matrix of the wrong size, or negative.
  EXPECT_FALSE(CheckPlannedEntry(Entry({}, {1, 2}), sets, 2, nullptr, 2).ok());
  EXPECT_FALSE(CheckPlannedEntry(Entry({}, {2, 2, -1, 4}), sets, 2, nullptr, 2).ok());
}

TEST(PlanCheckTest, ParkedSetWithoutRequestsIsAnErrorNotACrash) {
  // Found by plan_check_fuzzer: the first set's kind was read before any set
  // was checked for requests.
  std::vector<ReadySet> sets(1);
  sets[0].name = "t";
  absl::Status s = CheckPlannedEntry(Entry({}, {}), sets, 2, nullptr, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
}

TEST(PlanCheckTest, AllgatherRowsMustBeThisNodesOwn) {
  std::vector<ReadySet> sets;
  sets.push_back(Parked(CollectiveKind::kAllgather, {0}, 5));
  EXPECT_TRUE(CheckPlannedEntry(Entry({5, 7}, {}), sets, 2, nullptr, 2).ok());
  absl::Status s = CheckPlannedEntry(Entry({6, 7}, {}), sets, 2, nullptr, 2);
  EXPECT_TRUE(absl::StrContains(s.message(), "gives rank 0 6 rows, it submitted 5")) << s;
  EXPECT_FALSE(CheckPlannedEntry(Entry({5}, {}), sets, 2, nullptr, 2).ok());
  EXPECT_FALSE(CheckPlannedEntry(Entry({5, int64_t{1} << 60}, {}), sets, 2, nullptr, 2).ok());
}

TEST(PlanCheckTest, KindsAndNodesMustFit) {
  std::vector<ReadySet> sets;
  sets.push_back(Parked(CollectiveKind::kAllreduce, {0}, 5));
  sets.push_back(Parked(CollectiveKind::kBroadcast, {0}, 5));
  EXPECT_FALSE(CheckPlannedEntry(Entry({}, {}), sets, 2, nullptr, 2).ok());
  sets.pop_back();
  EXPECT_FALSE(CheckPlannedEntry(Entry({}, {1, 1, 1, 1}), sets, 2, nullptr, 2).ok());
  PlannedEntry e = Entry({}, {});
  e.joined_nodes = {7};
  EXPECT_FALSE(CheckPlannedEntry(e, sets, 2, nullptr, 2).ok());
}

TEST(PlanCheckTest, AWelcomeMustPlaceThisNodeAsItIs) {
  kolo::v1::Welcome w;
  for (int n = 0; n < 2; ++n) {
    auto* e = w.add_nodes();
    e->add_ranks(n);
    e->set_ucx_address(n == 0 ? "addr0" : "addr1");
  }
  w.set_node_index(1);
  EXPECT_TRUE(CheckWelcome(w, 2, {1}, "addr1").ok());
  EXPECT_FALSE(CheckWelcome(w, 2, {1}, "someone else").ok());
  EXPECT_FALSE(CheckWelcome(w, 3, {1}, "addr1").ok());  // rank 2 nowhere
  w.mutable_nodes(0)->add_ranks(1);                     // rank 1 twice
  EXPECT_FALSE(CheckWelcome(w, 2, {1}, "addr1").ok());
}

}  // namespace
}  // namespace kolo::daemon
