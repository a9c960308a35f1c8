#include "daemon/job/request_table.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

Request MakeRequest(const std::string& name, int rank) {
  Request r;
  r.request_id = 1000 + rank;
  r.rank = rank;
  r.kind = CollectiveKind::kAllreduce;
  r.dtype = DType::kFloat32;
  r.op = ReduceOp::kSum;
  r.shape = {4, 4};
  r.bytes = 64;
  r.name = name;
  r.submitted_at = absl::FromUnixSeconds(100 + rank);
  return r;
}

// Adds every request in order; expects all but the last to leave the name
// pending, and returns what the last one produced.
ReadySet AddAll(RequestTable& table, std::vector<Request> requests) {
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<std::optional<ReadySet>> got = table.Add(requests[i]);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return {};
    if (i + 1 < requests.size()) {
      EXPECT_FALSE(got->has_value())
          << "ready after " << i + 1 << " of " << requests.size() << " ranks";
    } else {
      EXPECT_TRUE(got->has_value()) << "not ready after every rank submitted";
      if (got->has_value()) return std::move(**got);
    }
  }
  return {};
}

TEST(RequestTableTest, ReadyOnlyWhenEveryRankSubmittedInAnyOrder) {
  const std::vector<std::vector<int>> orders = {{0, 1, 2}, {2, 1, 0}, {1, 2, 0}, {2, 0, 1}};
  for (const auto& order : orders) {
    RequestTable table(3);
    std::vector<Request> requests;
    for (int rank : order) requests.push_back(MakeRequest("grad/w1", rank));
    ReadySet ready = AddAll(table, std::move(requests));
    EXPECT_EQ(ready.name, "grad/w1");
    EXPECT_TRUE(ready.agreement.ok()) << ready.agreement;
    ASSERT_EQ(ready.requests.size(), 3u);
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_EQ(ready.requests[rank].rank, rank) << "ready set not by rank";
      EXPECT_EQ(ready.requests[rank].request_id, 1000u + rank);
    }
    EXPECT_EQ(table.pending_names(), 0u);
  }
}

TEST(RequestTableTest, SingleRankJobIsReadyAtOnce) {
  RequestTable table(1);
  Request r = MakeRequest("solo", 0);
  absl::StatusOr<std::optional<ReadySet>> got = table.Add(r);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->requests.size(), 1u);
  EXPECT_TRUE((*got)->agreement.ok());
}

TEST(RequestTableTest, NamesAreTrackedIndependently) {
  RequestTable table(2);
  Request a0 = MakeRequest("a", 0);
  Request b1 = MakeRequest("b", 1);
  ASSERT_FALSE(table.Add(a0)->has_value());
  ASSERT_FALSE(table.Add(b1)->has_value());
  EXPECT_EQ(table.pending_names(), 2u);
  Request a1 = MakeRequest("a", 1);
  absl::StatusOr<std::optional<ReadySet>> got = table.Add(a1);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->name, "a");
  EXPECT_EQ(table.pending_names(), 1u);
}

TEST(RequestTableTest, DuplicateInFlightNameIsRefusedAndOriginalStands) {
  RequestTable table(2);
  Request first = MakeRequest("grad/w1", 1);
  ASSERT_TRUE(table.Add(first).ok());

  Request again = MakeRequest("grad/w1", 1);
  again.request_id = 4242;
  again.shape = {9};
  absl::StatusOr<std::optional<ReadySet>> dup = table.Add(again);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(std::string(dup.status().message()).find("\"grad/w1\": rank 1"), std::string::npos)
      << dup.status();
  // The refused request is left untouched for the caller to fail.
  EXPECT_EQ(again.name, "grad/w1");
  EXPECT_EQ(again.request_id, 4242u);
  EXPECT_EQ(again.shape, (std::vector<int64_t>{9}));

  Request other = MakeRequest("grad/w1", 0);
  absl::StatusOr<std::optional<ReadySet>> got = table.Add(other);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_TRUE((*got)->agreement.ok()) << (*got)->agreement;
  EXPECT_EQ((*got)->requests[1].request_id, 1001u);
  EXPECT_EQ((*got)->requests[1].shape, (std::vector<int64_t>{4, 4}));
}

// Submits `rank0` and `rank1` as a two-rank job (rank 1 first, so the order
// of arrival is not what names the ranks) and returns the agreement.
absl::Status AgreementOf(const Request& rank0, const Request& rank1) {
  RequestTable table(2);
  Request a = rank1;
  Request b = rank0;
  EXPECT_TRUE(table.Add(a).ok());
  absl::StatusOr<std::optional<ReadySet>> got = table.Add(b);
  EXPECT_TRUE(got.ok() && got->has_value());
  if (!got.ok() || !got->has_value()) return absl::InternalError("not ready");
  EXPECT_EQ((*got)->requests.size(), 2u);
  return (*got)->agreement;
}

void ExpectMismatch(const absl::Status& s, const std::string& message) {
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(std::string(s.message()), message);
}

TEST(RequestTableTest, RefusalFailsTheNameForEveryRankWithTheReason) {
  // Rank 1 refused it; the set is ready (and failed) only once every rank
  // submitted, whatever the order, and the refusal wins over any other
  // difference (the refusal has no shape).
  for (const std::vector<int>& order : std::vector<std::vector<int>>{{0, 1, 2}, {1, 2, 0}}) {
    RequestTable table(3);
    std::vector<Request> requests;
    for (int rank : order) {
      Request r = MakeRequest("grad/w1", rank);
      if (rank == 1) {
        r.shape.clear();
        r.bytes = 0;
        r.refusal = "bool has no average";
      }
      requests.push_back(std::move(r));
    }
    ReadySet set = AddAll(table, std::move(requests));
    EXPECT_EQ(set.agreement.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(set.agreement.message(),
              "allreduce \"grad/w1\": rank 1 refused it: bool has no average");
    EXPECT_EQ(set.requests.size(), 3u);
  }
}

TEST(RequestTableTest, ShapeMismatchNamesTensorRanksAndShapes) {
  Request r0 = MakeRequest("grad/w1", 0);
  Request r1 = MakeRequest("grad/w1", 1);
  r1.shape = {4, 5};
  ExpectMismatch(AgreementOf(r0, r1),
                 "allreduce \"grad/w1\": rank 1 sent shape [4,5], rank 0 sent "
                 "[4,4]");
}

TEST(RequestTableTest, ShapeRankMismatchIsAShapeMismatch) {
  Request r0 = MakeRequest("grad/w1", 0);
  Request r1 = MakeRequest("grad/w1", 1);
  r1.shape = {16};
  ExpectMismatch(AgreementOf(r0, r1),
                 "allreduce \"grad/w1\": rank 1 sent shape [16], rank 0 sent "
                 "[4,4]");
}

TEST(RequestTableTest, DtypeMismatchNamesBothDtypes) {
  Request r0 = MakeRequest("grad/w1", 0);
  Request r1 = MakeRequest("grad/w1", 1);
  r1.dtype = DType::kFloat16;
  ExpectMismatch(AgreementOf(r0, r1),
                 "allreduce \"grad/w1\": rank 1 sent dtype float16, rank 0 "
                 "sent float32");
}

TEST(RequestTableTest, OpMismatchNamesBothOps) {
  Request r0 = MakeRequest("grad/w1", 0);
  Request r1 = MakeRequest("grad/w1", 1);
  r1.op = ReduceOp::kMax;
  ExpectMismatch(AgreementOf(r0, r1), "allreduce \"grad/w1\": rank 1 sent op max, rank 0 sent sum");
}

TEST(RequestTableTest, PrescaleMismatchNamesBothFactors) {
  Request r0 = MakeRequest("grad/w1", 0);
  Request r1 = MakeRequest("grad/w1", 1);
  r1.prescale = 0.5;
  ExpectMismatch(AgreementOf(r0, r1),
                 "allreduce \"grad/w1\": rank 1 sent prescale 0.5, rank 0 "
                 "sent 1");
}

TEST(RequestTableTest, PostscaleMismatchNamesBothFactors) {
  Request r0 = MakeRequest("grad/w1", 0);
  Request r1 = MakeRequest("grad/w1", 1);
  r0.postscale = 0.25;
  r1.postscale = 2;
  ExpectMismatch(AgreementOf(r0, r1),
                 "allreduce \"grad/w1\": rank 1 sent postscale 2, rank 0 "
                 "sent 0.25");
}

TEST(RequestTableTest, BroadcastRootMismatchNamesBothRoots) {
  Request r0 = MakeRequest("params/w", 0);
  Request r1 = MakeRequest("params/w", 1);
  r0.kind = r1.kind = CollectiveKind::kBroadcast;
  r0.root_rank = 0;
  r1.root_rank = 1;
  ExpectMismatch(AgreementOf(r0, r1),
                 "broadcast \"params/w\": rank 1 sent root rank 1, rank 0 "
                 "sent 0");
}

TEST(RequestTableTest, CollectiveKindMismatchNamesBothKinds) {
  Request r0 = MakeRequest("grad/w1", 0);
  Request r1 = MakeRequest("grad/w1", 1);
  r1.kind = CollectiveKind::kBroadcast;
  ExpectMismatch(AgreementOf(r0, r1),
                 "allreduce \"grad/w1\": rank 1 sent collective broadcast, "
                 "rank 0 sent allreduce");
}

TEST(RequestTableTest, FieldsThatDoNotApplyToTheKindAreNotCompared) {
  // Broadcast ignores op and scale factors; allreduce ignores the root.
  Request b0 = MakeRequest("params/w", 0);
  Request b1 = MakeRequest("params/w", 1);
  b0.kind = b1.kind = CollectiveKind::kBroadcast;
  b1.op = ReduceOp::kMax;
  b1.prescale = 3;
  EXPECT_TRUE(AgreementOf(b0, b1).ok());
  Request a0 = MakeRequest("grad/w1", 0);
  Request a1 = MakeRequest("grad/w1", 1);
  a1.root_rank = 1;
  EXPECT_TRUE(AgreementOf(a0, a1).ok());
}

TEST(RequestTableTest, MismatchOnAHigherRankNamesThatRank) {
  RequestTable table(4);
  std::vector<Request> requests;
  for (int rank : {3, 0, 2, 1}) requests.push_back(MakeRequest("g", rank));
  requests[2].shape = {8};  // rank 2
  ReadySet ready = AddAll(table, std::move(requests));
  ExpectMismatch(ready.agreement, "allreduce \"g\": rank 2 sent shape [8], rank 0 sent [4,4]");
  // A mismatched set is still handed out whole, to fail every rank.
  EXPECT_EQ(ready.requests.size(), 4u);
}

TEST(RequestTableTest, PendingListsSubmittedAndMissingRanks) {
  RequestTable table(4);
  Request a3 = MakeRequest("a", 3);
  Request a1 = MakeRequest("a", 1);
  Request b2 = MakeRequest("b", 2);
  b2.kind = CollectiveKind::kBroadcast;
  ASSERT_TRUE(table.Add(a3).ok());
  ASSERT_TRUE(table.Add(a1).ok());
  ASSERT_TRUE(table.Add(b2).ok());

  std::vector<PendingView> pending = table.Pending();
  ASSERT_EQ(pending.size(), 2u);
  const PendingView* a = nullptr;
  const PendingView* b = nullptr;
  for (const PendingView& v : pending) (v.name == "a" ? a : b) = &v;
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->name, "b");
  EXPECT_EQ(a->kind, CollectiveKind::kAllreduce);
  EXPECT_EQ(a->submitted, (std::vector<int>{1, 3}));
  EXPECT_EQ(a->missing, (std::vector<int>{0, 2}));
  EXPECT_EQ(a->first_submitted, absl::FromUnixSeconds(103));  // rank 3's
  EXPECT_EQ(b->kind, CollectiveKind::kBroadcast);
  EXPECT_EQ(b->submitted, (std::vector<int>{2}));
  EXPECT_EQ(b->missing, (std::vector<int>{0, 1, 3}));
}

TEST(RequestTableTest, PendingIsEmptyForAFreshTable) {
  RequestTable table(3);
  EXPECT_TRUE(table.Pending().empty());
  EXPECT_EQ(table.pending_names(), 0u);
}

TEST(RequestTableTest, TakeAllReturnsEveryPendingRequestAndEmptiesTable) {
  RequestTable table(3);
  std::vector<Request> in = {MakeRequest("a", 0), MakeRequest("a", 2), MakeRequest("b", 1),
                             MakeRequest("c", 0), MakeRequest("c", 1)};
  for (Request& r : in) ASSERT_TRUE(table.Add(r).ok());
  // Two ranks of "d" then the third: ready, so not pending any more.
  std::vector<Request> d = {MakeRequest("d", 0), MakeRequest("d", 1), MakeRequest("d", 2)};
  AddAll(table, std::move(d));

  std::vector<Request> taken = table.TakeAll();
  std::vector<std::pair<std::string, int>> got;
  for (const Request& r : taken) got.emplace_back(r.name, r.rank);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::pair<std::string, int>>{
                     {"a", 0}, {"a", 2}, {"b", 1}, {"c", 0}, {"c", 1}}));
  EXPECT_EQ(table.pending_names(), 0u);
  EXPECT_TRUE(table.Pending().empty());
  EXPECT_TRUE(table.TakeAll().empty());
}

TEST(RequestTableTest, NameCanBeReusedAfterItBecameReady) {
  RequestTable table(2);
  for (int round = 0; round < 3; ++round) {
    std::vector<Request> requests = {MakeRequest("grad/w1", 1), MakeRequest("grad/w1", 0)};
    requests[0].request_id = 10 * round + 1;
    requests[1].request_id = 10 * round;
    ReadySet ready = AddAll(table, std::move(requests));
    ASSERT_EQ(ready.requests.size(), 2u);
    EXPECT_EQ(ready.requests[0].request_id, 10u * round);
    EXPECT_EQ(ready.requests[1].request_id, 10u * round + 1);
  }
  EXPECT_EQ(table.pending_names(), 0u);
}

TEST(RequestTableTest, NameCanBeReusedAfterTakeAll) {
  RequestTable table(2);
  Request r = MakeRequest("x", 0);
  ASSERT_TRUE(table.Add(r).ok());
  table.TakeAll();
  Request again = MakeRequest("x", 0);
  absl::StatusOr<std::optional<ReadySet>> got = table.Add(again);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_value());
}

TEST(CheckAgreementTest, IdenticalRequestsAgree) {
  std::vector<Request> requests = {MakeRequest("g", 0), MakeRequest("g", 1), MakeRequest("g", 2)};
  EXPECT_TRUE(CheckAgreement(requests).ok());
}

TEST(RequestTableTest, DeviceAndHostTensorsDisagreeNamingRanks) {
  RequestTable table(3);
  std::vector<Request> requests;
  for (int rank = 0; rank < 3; ++rank) requests.push_back(MakeRequest("grad/mixed", rank));
  requests[0].device = cuda::DeviceIo{};
  requests[0].device->input.device = 0;
  requests[1].device = requests[0].device;
  ReadySet ready = AddAll(table, std::move(requests));
  EXPECT_EQ(ready.agreement.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ready.agreement.message(),
            "allreduce \"grad/mixed\": rank 2 sent a tensor in host memory, rank 0 sent a "
            "tensor on CUDA device 0");
}

TEST(RequestTableTest, DeviceTensorsOnDifferentGpusAgree) {
  // One rank per GPU is the usual layout: each GPU is an NCCL rank.
  RequestTable table(2);
  std::vector<Request> requests;
  for (int rank = 0; rank < 2; ++rank) {
    requests.push_back(MakeRequest("grad/gpus", rank));
    requests.back().device = cuda::DeviceIo{};
    requests.back().device->input.device = rank;
  }
  ReadySet ready = AddAll(table, std::move(requests));
  EXPECT_TRUE(ready.agreement.ok()) << ready.agreement;
}

TEST(RequestTableTest, DeviceTensorsOnOneGpuAgree) {
  RequestTable table(2);
  std::vector<Request> requests;
  for (int rank = 0; rank < 2; ++rank) {
    requests.push_back(MakeRequest("grad/gpu", rank));
    requests.back().device = cuda::DeviceIo{};
    requests.back().device->input.device = 0;
  }
  ReadySet ready = AddAll(table, std::move(requests));
  EXPECT_TRUE(ready.agreement.ok()) << ready.agreement;
}

}  // namespace
}  // namespace kolo::daemon
