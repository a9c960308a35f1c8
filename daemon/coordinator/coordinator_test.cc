#include "daemon/coordinator/coordinator.h"

#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

struct RecordingSink : MemberSink {
  void Send(std::shared_ptr<const kolo::v1::CoordinatorMessage> m) override {
    messages.push_back(*m);
  }
  std::vector<kolo::v1::CoordinatorMessage> messages;
  std::vector<kolo::v1::Plan> plans() const {
    std::vector<kolo::v1::Plan> out;
    for (const auto& m : messages) {
      if (m.has_plan()) out.push_back(m.plan());
    }
    return out;
  }
};

kolo::v1::Hello Hello(const std::string& node, std::vector<int> ranks,
                      const std::string& token = "tok") {
  kolo::v1::Hello h;
  h.set_job_id("job");
  h.set_job_token(token);
  h.set_node(node);
  h.set_size(4);
  for (int r : ranks) h.add_ranks(r);
  h.set_ucx_address("addr-" + node);
  return h;
}

kolo::v1::TensorMeta Meta(const std::string& name, std::vector<int64_t> shape = {4}) {
  kolo::v1::TensorMeta m;
  m.set_name(name);
  m.set_kind(1);   // allreduce
  m.set_dtype(6);  // float32
  for (int64_t d : shape) m.add_shape(d);
  m.set_prescale(1);
  m.set_postscale(1);
  m.set_bytes(16);
  return m;
}

kolo::v1::Ready ReadyOf(std::vector<kolo::v1::TensorMeta> metas) {
  kolo::v1::Ready r;
  for (auto& m : metas) *r.add_tensors() = m;
  return r;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void Join() {
    a_ = std::make_shared<RecordingSink>();
    b_ = std::make_shared<RecordingSink>();
    // The node with rank 0 joins second but is node 0.
    auto b = c_.AddMember(Hello("B", {2, 3}), b_);
    ASSERT_TRUE(b.ok());
    EXPECT_TRUE(b_->messages.empty());  // not every rank is known yet
    auto a = c_.AddMember(Hello("A", {0, 1}), a_);
    ASSERT_TRUE(a.ok());
    ida_ = *a;
    idb_ = *b;
  }
  Coordinator c_{"job", "tok", 4, CoordinatorOptions{64 << 20, 4}};
  std::shared_ptr<RecordingSink> a_, b_;
  int ida_ = -1, idb_ = -1;
};

TEST_F(CoordinatorTest, WelcomesEveryNodeInRankOrder) {
  Join();
  ASSERT_EQ(a_->messages.size(), 1u);
  ASSERT_TRUE(a_->messages[0].has_welcome());
  const auto& w = a_->messages[0].welcome();
  EXPECT_EQ(w.node_index(), 0);
  ASSERT_EQ(w.nodes_size(), 2);
  EXPECT_EQ(w.nodes(0).node(), "A");
  EXPECT_EQ(w.nodes(1).ucx_address(), "addr-B");
  EXPECT_EQ(b_->messages[0].welcome().node_index(), 1);
}

TEST_F(CoordinatorTest, PlansOnlyWhenEveryNodeIsReadyAndInTheSameOrderForAll) {
  Join();
  c_.OnReady(ida_, ReadyOf({Meta("x"), Meta("y")}));
  EXPECT_TRUE(a_->plans().empty());
  c_.OnReady(idb_, ReadyOf({Meta("y")}));
  ASSERT_EQ(a_->plans().size(), 1u);
  c_.OnReady(idb_, ReadyOf({Meta("x")}));
  ASSERT_EQ(a_->plans().size(), 2u);
  EXPECT_EQ(a_->plans()[0].SerializeAsString(), b_->plans()[0].SerializeAsString());
  EXPECT_EQ(a_->plans()[0].responses(0).members(0).name(), "y");
  EXPECT_EQ(a_->plans()[1].responses(0).members(0).name(), "x");
}

TEST_F(CoordinatorTest, FusesCompatibleTensorsAndCachesRepeatedNames) {
  Join();
  c_.OnReady(ida_, ReadyOf({Meta("g1"), Meta("g2")}));
  c_.OnReady(idb_, ReadyOf({Meta("g1"), Meta("g2")}));
  ASSERT_EQ(a_->plans().size(), 1u);
  const kolo::v1::Plan p = a_->plans()[0];
  ASSERT_EQ(p.responses_size(), 1);
  EXPECT_EQ(p.responses(0).members_size(), 2);
  ASSERT_EQ(p.new_cache_ids_size(), 2);
  // Next step: both nodes report by cache bit; the plan uses ids.
  kolo::v1::Ready bits;
  bits.set_cached_bits(std::string(1, '\x03'));
  c_.OnReady(ida_, bits);
  c_.OnReady(idb_, bits);
  ASSERT_EQ(a_->plans().size(), 2u);
  const kolo::v1::Plan q = a_->plans()[1];
  ASSERT_EQ(q.responses(0).members_size(), 2);
  EXPECT_TRUE(q.responses(0).members(0).has_cache_id());
  EXPECT_EQ(q.new_cache_ids_size(), 0);
}

// Caches g1 and g2 (ids 0 and 1) with one step of full reports.
void CacheTwoNames(Coordinator& c, int a, int b) {
  c.OnReady(a, ReadyOf({Meta("g1"), Meta("g2")}));
  c.OnReady(b, ReadyOf({Meta("g1"), Meta("g2")}));
}

kolo::v1::Ready Bits(char bits) {
  kolo::v1::Ready r;
  r.set_cached_bits(std::string(1, bits));
  return r;
}

TEST_F(CoordinatorTest, ARepeatedCacheBitFromOneNodeCountsOnce) {
  Join();
  CacheTwoNames(c_, ida_, idb_);
  c_.OnReady(ida_, Bits('\x01'));
  c_.OnReady(ida_, Bits('\x01'));
  EXPECT_EQ(a_->plans().size(), 1u);  // B has not reported g1
  c_.OnReady(idb_, Bits('\x01'));
  ASSERT_EQ(a_->plans().size(), 2u);
  ASSERT_EQ(a_->plans()[1].responses_size(), 1);
  EXPECT_EQ(a_->plans()[1].responses(0).members(0).cache_id(), 0u);
  // The round is over: g1 needs both nodes again.
  c_.OnReady(idb_, Bits('\x01'));
  EXPECT_EQ(a_->plans().size(), 2u);
  c_.OnReady(ida_, Bits('\x01'));
  EXPECT_EQ(a_->plans().size(), 3u);
}

TEST_F(CoordinatorTest, ABitAndAFullReportOfOneNameMeet) {
  Join();
  CacheTwoNames(c_, ida_, idb_);
  // A reports g2 by bit, B in full (its cache did not have it): one round.
  c_.OnReady(ida_, Bits('\x02'));
  c_.OnReady(idb_, ReadyOf({Meta("g2")}));
  ASSERT_EQ(a_->plans().size(), 2u);
  EXPECT_EQ(a_->plans()[1].responses(0).error_code(), 0);
  EXPECT_EQ(a_->plans()[1].responses(0).members(0).cache_id(), 1u);
  // The other way round, and a disagreement in the full report is caught.
  c_.OnReady(idb_, Bits('\x02'));
  c_.OnReady(ida_, ReadyOf({Meta("g2", {8})}));
  ASSERT_EQ(a_->plans().size(), 3u);
  EXPECT_NE(a_->plans()[2].responses(0).error_code(), 0);
  EXPECT_TRUE(absl::StrContains(a_->plans()[2].responses(0).error_message(), "shape"))
      << a_->plans()[2].responses(0).error_message();
}

TEST_F(CoordinatorTest, AJoinCompletesANameOthersReportedByBit) {
  Join();
  CacheTwoNames(c_, ida_, idb_);
  c_.OnReady(idb_, Bits('\x01'));  // B: g1, by bit
  kolo::v1::TensorMeta joined = Meta("kolo.join");
  joined.set_kind(7);  // join
  joined.add_aux(1);
  c_.OnReady(ida_, ReadyOf({joined}));  // A joins: g1 runs with A's zeros
  ASSERT_EQ(b_->plans().size(), 2u);
  const kolo::v1::PlannedResponse r = b_->plans()[1].responses(0);
  EXPECT_EQ(r.error_code(), 0) << r.error_message();
  EXPECT_EQ(r.members(0).cache_id(), 0u);
  ASSERT_EQ(r.joined_nodes_size(), 1);
  EXPECT_EQ(r.joined_nodes(0), 0);
}

TEST_F(CoordinatorTest, DisagreementNamesRanksNodesAndValues) {
  Join();
  c_.OnReady(ida_, ReadyOf({Meta("w", {4, 4})}));
  c_.OnReady(idb_, ReadyOf({Meta("w", {4, 5})}));
  ASSERT_EQ(b_->plans().size(), 1u);
  const kolo::v1::PlannedResponse r = b_->plans()[0].responses(0);
  EXPECT_NE(r.error_code(), 0);
  EXPECT_TRUE(absl::StrContains(r.error_message(),
                                "allreduce \"w\": ranks 2-3 (node B) sent shape [4,5], ranks 0-1 "
                                "(node A) sent [4,4]"))
      << r.error_message();
}

TEST_F(CoordinatorTest, NodesAreHeldToTheRanksRuleForMemoryAndGroupSize) {
  Join();
  kolo::v1::TensorMeta on_device = Meta("d");
  on_device.set_device(true);
  kolo::v1::TensorMeta grouped = Meta("g");
  grouped.set_group_size(2);
  c_.OnReady(ida_, ReadyOf({Meta("d"), Meta("g")}));
  c_.OnReady(idb_, ReadyOf({on_device, grouped}));
  ASSERT_EQ(b_->plans().size(), 1u);
  const kolo::v1::Plan p = b_->plans()[0];
  ASSERT_EQ(p.responses_size(), 2);
  EXPECT_EQ(p.responses(0).error_code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(p.responses(0).error_message(),
            "allreduce \"d\": ranks 2-3 (node B) sent a tensor in device memory, ranks 0-1 "
            "(node A) sent a tensor in host memory");
  EXPECT_EQ(p.responses(1).error_message(),
            "allreduce \"g\": ranks 2-3 (node B) sent group size 2, ranks 0-1 (node A) sent 0");
}

TEST_F(CoordinatorTest, WrongTokenAndTakenRanksAreRefused) {
  auto sink = std::make_shared<RecordingSink>();
  EXPECT_EQ(c_.AddMember(Hello("X", {0}, "nope"), sink).status().code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(c_.AddMember(Hello("A", {0, 1}), sink).ok());
  EXPECT_EQ(c_.AddMember(Hello("C", {1, 2}), sink).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(CoordinatorTest, SilenceOrALostMemberAbortsEveryone) {
  Join();
  EXPECT_TRUE(c_.Tick(absl::Now(), absl::Seconds(10)));
  EXPECT_FALSE(c_.Tick(absl::Now() + absl::Seconds(30), absl::Seconds(10)));
  ASSERT_TRUE(a_->messages.back().has_abort());
  EXPECT_TRUE(absl::StrContains(a_->messages.back().abort().reason(), "sent nothing for 10 s"));
}

TEST_F(CoordinatorTest, LostMemberIsNamed) {
  Join();
  c_.MemberLost(idb_, "its connection broke");
  ASSERT_TRUE(a_->messages.back().has_abort());
  EXPECT_TRUE(absl::StrContains(a_->messages.back().abort().reason(), "ranks 2-3 (node B) left"));
  EXPECT_TRUE(c_.aborted());
  EXPECT_EQ(c_.members(), 1);
}

kolo::v1::TensorMeta Allgather(const std::string& name, std::vector<int64_t> rows,
                               int64_t cols = 3) {
  kolo::v1::TensorMeta m = Meta(name, {rows.front(), cols});
  m.set_kind(3);  // allgather
  for (int64_t r : rows) m.add_rows(r);
  return m;
}

TEST_F(CoordinatorTest, AllgatherPlansCarryEveryRanksRowsAndAreNeverCached) {
  Join();
  for (int step = 0; step < 2; ++step) {
    // Node A hosts ranks 0,1; node B ranks 2,3. Rows differ per rank and step.
    c_.OnReady(ida_, ReadyOf({Allgather("ag", {step, 1})}));
    c_.OnReady(idb_, ReadyOf({Allgather("ag", {5, 7 + step})}));
    std::vector<kolo::v1::Plan> plans = b_->plans();
    ASSERT_EQ(plans.size(), static_cast<size_t>(step + 1));
    const kolo::v1::Plan& plan = plans.back();
    EXPECT_EQ(plan.sequence(), static_cast<uint64_t>(step));
    ASSERT_EQ(plan.responses_size(), 1);
    const auto& r = plan.responses(0);
    EXPECT_EQ(r.error_code(), 0) << r.error_message();
    ASSERT_EQ(r.rows_size(), 4);
    EXPECT_EQ(r.rows(0), step);
    EXPECT_EQ(r.rows(1), 1);
    EXPECT_EQ(r.rows(2), 5);
    EXPECT_EQ(r.rows(3), 7 + step);
    ASSERT_EQ(r.members_size(), 1);
    EXPECT_EQ(r.members(0).name(), "ag");  // by name every time
    EXPECT_EQ(plan.new_cache_ids_size(), 0);
  }
}

TEST_F(CoordinatorTest, AllgathersAreNotFusedAndDisagreeOnColumnsOnly) {
  Join();
  c_.OnReady(ida_, ReadyOf({Allgather("ag1", {1, 2}), Allgather("ag2", {1, 1}),
                            Allgather("ag3", {2, 2})}));
  c_.OnReady(idb_, ReadyOf({Allgather("ag1", {3, 4}), Allgather("ag2", {1, 1}),
                            Allgather("ag3", {2, 2}, /*cols=*/4)}));
  std::vector<kolo::v1::Plan> plans = b_->plans();
  ASSERT_EQ(plans.size(), 1u);
  ASSERT_EQ(plans[0].responses_size(), 3);
  EXPECT_EQ(plans[0].responses(0).error_code(), 0);
  EXPECT_EQ(plans[0].responses(1).error_code(), 0);
  const auto& bad = plans[0].responses(2);
  EXPECT_NE(bad.error_code(), 0);
  EXPECT_TRUE(absl::StrContains(bad.error_message(), "shape")) << bad.error_message();
}

TEST_F(CoordinatorTest, ProcessSetsGetIdsInPlanOrderAndOnlyTheirNodesReport) {
  Join();
  kolo::v1::TensorMeta add = Meta("ps.add");
  add.set_kind(8);  // add_process_set
  add.add_aux(0);
  add.add_aux(1);
  c_.OnReady(ida_, ReadyOf({add}));
  c_.OnReady(idb_, ReadyOf({add}));
  std::vector<kolo::v1::Plan> plans = b_->plans();
  ASSERT_EQ(plans.size(), 1u);
  ASSERT_EQ(plans[0].responses_size(), 1);
  EXPECT_EQ(plans[0].responses(0).new_process_set(), 1);
  // Set 1 = ranks 0,1, all on node A: A's report alone makes it ready, and
  // the same name on set 0 is another tensor.
  kolo::v1::TensorMeta t = Meta("grad");
  t.set_process_set(1);
  c_.OnReady(ida_, ReadyOf({t}));
  plans = b_->plans();
  ASSERT_EQ(plans.size(), 2u);
  ASSERT_EQ(plans[1].responses_size(), 1);
  EXPECT_EQ(plans[1].responses(0).process_set(), 1);
  EXPECT_EQ(plans[1].responses(0).members(0).name(), "grad");
  c_.OnReady(ida_, ReadyOf({Meta("grad")}));
  EXPECT_EQ(b_->plans().size(), 2u);  // set 0 needs node B too
  c_.OnReady(idb_, ReadyOf({Meta("grad")}));
  ASSERT_EQ(b_->plans().size(), 3u);
  EXPECT_EQ(b_->plans()[2].responses(0).process_set(), 0);
  // Removing a set that does not exist fails on every node.
  kolo::v1::TensorMeta remove = Meta("ps.remove");
  remove.set_kind(9);  // remove_process_set
  remove.add_aux(7);
  c_.OnReady(ida_, ReadyOf({remove}));
  c_.OnReady(idb_, ReadyOf({remove}));
  ASSERT_EQ(b_->plans().size(), 4u);
  EXPECT_NE(b_->plans()[3].responses(0).error_code(), 0);
}

TEST_F(CoordinatorTest, AJoinedNodeTakesPartWithZerosUntilEveryNodeJoined) {
  Join();
  kolo::v1::TensorMeta joined = Meta("kolo.join");
  joined.set_kind(7);  // join
  joined.add_aux(1);   // node A's last rank to join
  c_.OnReady(ida_, ReadyOf({joined}));
  EXPECT_TRUE(b_->plans().empty());
  // Node B alone makes "grad" ready; node A takes part, laid out from metas.
  c_.OnReady(idb_, ReadyOf({Meta("grad")}));
  std::vector<kolo::v1::Plan> plans = b_->plans();
  ASSERT_EQ(plans.size(), 1u);
  const auto& r = plans[0].responses(0);
  EXPECT_EQ(r.error_code(), 0) << r.error_message();
  ASSERT_EQ(r.joined_nodes_size(), 1);
  EXPECT_EQ(r.joined_nodes(0), 0);
  ASSERT_EQ(r.metas_size(), 1);
  EXPECT_EQ(r.metas(0).name(), "grad");
  // An allgather cannot run while ranks have joined.
  kolo::v1::TensorMeta ag = Allgather("ag", {2, 2});
  c_.OnReady(idb_, ReadyOf({ag}));
  ASSERT_EQ(b_->plans().size(), 2u);
  EXPECT_NE(b_->plans()[1].responses(0).error_code(), 0);
  EXPECT_TRUE(absl::StrContains(b_->plans()[1].responses(0).error_message(), "joined"));
  // Node B joins last: the join completes with its last rank.
  joined.set_aux(0, 3);
  c_.OnReady(idb_, ReadyOf({joined}));
  ASSERT_EQ(b_->plans().size(), 3u);
  EXPECT_EQ(b_->plans()[2].responses(0).last_joined(), 3);
  // After the join everyone reports again.
  c_.OnReady(idb_, ReadyOf({Meta("after")}));
  EXPECT_EQ(b_->plans().size(), 3u);
  c_.OnReady(ida_, ReadyOf({Meta("after")}));
  ASSERT_EQ(b_->plans().size(), 4u);
  EXPECT_EQ(b_->plans()[3].responses(0).joined_nodes_size(), 0);
}

// As in Horovod: a broadcast fails on the ranks that did not join while a
// rank of its set has, whether the joined ranks are a whole node or some of
// one node's ranks.
TEST_F(CoordinatorTest, ABroadcastFailsWhileRanksHaveJoined) {
  Join();
  kolo::v1::TensorMeta bcast = Meta("params");
  bcast.set_kind(2);  // broadcast
  bcast.set_root_rank(2);
  // One of node A's ranks joined: its report counts it.
  kolo::v1::TensorMeta one_joined = bcast;
  one_joined.set_joined(1);
  c_.OnReady(ida_, ReadyOf({one_joined}));
  c_.OnReady(idb_, ReadyOf({bcast}));
  ASSERT_EQ(b_->plans().size(), 1u);
  EXPECT_EQ(b_->plans()[0].responses(0).error_code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(b_->plans()[0].responses(0).error_message(),
            "broadcast \"params\": cannot run while 1 rank has joined (broadcast does not run "
            "with joined ranks; only allreduce and barrier do)");
  // Every rank of node A joined: node B's broadcast fails alone.
  kolo::v1::TensorMeta joined = Meta("kolo.join");
  joined.set_kind(7);  // join
  joined.add_aux(1);
  c_.OnReady(ida_, ReadyOf({joined}));
  c_.OnReady(idb_, ReadyOf({bcast}));
  ASSERT_EQ(b_->plans().size(), 2u);
  EXPECT_TRUE(absl::StrContains(b_->plans()[1].responses(0).error_message(),
                                "2 ranks have joined (broadcast does not run with joined ranks"))
      << b_->plans()[1].responses(0).error_message();
  // An allreduce still runs beside the joined node.
  c_.OnReady(idb_, ReadyOf({Meta("grad")}));
  ASSERT_EQ(b_->plans().size(), 3u);
  EXPECT_EQ(b_->plans()[2].responses(0).error_code(), 0)
      << b_->plans()[2].responses(0).error_message();
}

TEST_F(CoordinatorTest, AJoinedCountBeyondTheNodesRanksFailsTheName) {
  // A member's count of its joined ranks is bounded by the ranks it has: a
  // broken or hostile one fails that name on every node, and huge counts
  // from two nodes do not overflow the sum.
  Join();
  kolo::v1::TensorMeta huge = Meta("grad");
  huge.set_joined(1650614882);
  kolo::v1::TensorMeta negative = Meta("grad");
  negative.set_joined(-5);
  c_.OnReady(ida_, ReadyOf({huge}));
  c_.OnReady(idb_, ReadyOf({huge}));
  std::vector<kolo::v1::Plan> plans = b_->plans();
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].responses(0).error_code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(absl::StrContains(plans[0].responses(0).error_message(),
                                "1650614882 of its 2 ranks as joined"))
      << plans[0].responses(0).error_message();
  c_.OnReady(ida_, ReadyOf({negative}));
  c_.OnReady(idb_, ReadyOf({Meta("grad")}));
  plans = b_->plans();
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_TRUE(absl::StrContains(plans[1].responses(0).error_message(), "-5 of its 2"))
      << plans[1].responses(0).error_message();
  // A count within the node's ranks is taken as before.
  kolo::v1::TensorMeta two = Meta("g2");
  two.set_joined(2);
  c_.OnReady(ida_, ReadyOf({two}));
  c_.OnReady(idb_, ReadyOf({Meta("g2")}));
  plans = b_->plans();
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[2].responses(0).error_code(), 0) << plans[2].responses(0).error_message();
}

TEST_F(CoordinatorTest, RemovingASetFailsItsWaitingNamesAndLaterOnes) {
  Join();
  kolo::v1::TensorMeta add = Meta("ps.add");
  add.set_kind(8);  // add_process_set {0, 2}: one rank on each node
  add.add_aux(0);
  add.add_aux(2);
  c_.OnReady(ida_, ReadyOf({add}));
  c_.OnReady(idb_, ReadyOf({add}));
  ASSERT_EQ(b_->plans().size(), 1u);
  kolo::v1::TensorMeta t = Meta("grad");
  t.set_process_set(1);
  c_.OnReady(ida_, ReadyOf({t}));  // node B's rank 2 never submits it
  kolo::v1::TensorMeta remove = Meta("ps.remove");
  remove.set_kind(9);
  remove.add_aux(1);
  c_.OnReady(ida_, ReadyOf({remove}));
  c_.OnReady(idb_, ReadyOf({remove}));
  std::vector<kolo::v1::Plan> plans = b_->plans();
  ASSERT_EQ(plans.size(), 2u);
  ASSERT_EQ(plans[1].responses_size(), 2);
  EXPECT_EQ(plans[1].responses(0).members(0).name(), "grad");
  EXPECT_TRUE(absl::StrContains(plans[1].responses(0).error_message(), "was removed"));
  EXPECT_EQ(plans[1].responses(1).error_code(), 0);  // the remove itself
  // A name of the removed set reported afterwards fails at once.
  c_.OnReady(idb_, ReadyOf({t}));
  ASSERT_EQ(b_->plans().size(), 3u);
  EXPECT_TRUE(absl::StrContains(b_->plans()[2].responses(0).error_message(), "does not exist"));
}

TEST_F(CoordinatorTest, ProcessSetsDoNotChangeWhileANodeHasJoined) {
  Join();
  kolo::v1::TensorMeta joined = Meta("kolo.join");
  joined.set_kind(7);
  joined.set_process_set(-1);
  joined.add_aux(1);
  c_.OnReady(ida_, ReadyOf({joined}));
  kolo::v1::TensorMeta add = Meta("ps.add");
  add.set_kind(8);
  add.add_aux(2);
  add.add_aux(3);
  c_.OnReady(idb_, ReadyOf({add}));
  ASSERT_EQ(b_->plans().size(), 1u);
  EXPECT_TRUE(absl::StrContains(b_->plans()[0].responses(0).error_message(), "joined"));
}

}  // namespace
}  // namespace kolo::daemon

namespace kolo::daemon {
namespace {

// A lane that records the plans it carries, by node; it can refuse.
class RecordingLane final : public MessageLane {
 public:
  void SetMessageHandler(Handler) override {}
  absl::Status SendMessage(int peer, std::shared_ptr<const std::string> message) override {
    if (refuse) return absl::InvalidArgumentError("refused");
    kolo::v1::CoordinatorMessage m;
    EXPECT_TRUE(m.ParseFromString(*message));
    sent.emplace_back(peer, m);
    return absl::OkStatus();
  }
  size_t max_message_bytes() const override { return 1 << 16; }
  std::vector<std::pair<int, kolo::v1::CoordinatorMessage>> sent;
  bool refuse = false;
};

std::string LaneReady(std::vector<kolo::v1::TensorMeta> metas) {
  kolo::v1::MemberMessage m;
  *m.mutable_ready() = ReadyOf(std::move(metas));
  return m.SerializeAsString();
}

TEST_F(CoordinatorTest, ANodeThatReportsOverTheLaneGetsItsPlansOverIt) {
  Join();
  RecordingLane lane;
  c_.UseLane(&lane);
  c_.OnReady(ida_, ReadyOf({Meta("x")}));
  c_.OnLaneMessage(/*node_index=*/1, LaneReady({Meta("x")}));
  // B (node 1) reported over the lane: its plan went there, not to its sink.
  ASSERT_EQ(lane.sent.size(), 1u);
  EXPECT_EQ(lane.sent[0].first, 1);
  ASSERT_TRUE(lane.sent[0].second.has_plan());
  EXPECT_EQ(lane.sent[0].second.plan().responses(0).members(0).name(), "x");
  EXPECT_TRUE(b_->plans().empty());
  // A reported over its sink and gets its plan there.
  ASSERT_EQ(a_->plans().size(), 1u);

  // A lane that cannot take a plan: it goes to the member's sink.
  lane.refuse = true;
  c_.OnReady(ida_, ReadyOf({Meta("y")}));
  c_.OnLaneMessage(1, LaneReady({Meta("y")}));
  ASSERT_EQ(b_->plans().size(), 1u);
  EXPECT_EQ(b_->plans()[0].sequence(), 1u);

  // Once the lane is let go (its transport is going), nothing is sent on it.
  lane.refuse = false;
  c_.UseLane(nullptr);
  c_.OnReady(ida_, ReadyOf({Meta("z")}));
  c_.OnLaneMessage(1, LaneReady({Meta("z")}));
  EXPECT_EQ(lane.sent.size(), 1u);
  EXPECT_EQ(b_->plans().size(), 2u);
}

TEST_F(CoordinatorTest, TheAbortSaysHowManyPlansWentBeforeIt) {
  Join();
  c_.OnReady(ida_, ReadyOf({Meta("x")}));
  c_.OnReady(idb_, ReadyOf({Meta("x")}));
  c_.OnAbort(ida_, absl::CancelledError("ranks finished"));
  ASSERT_FALSE(b_->messages.empty());
  ASSERT_TRUE(b_->messages.back().has_abort());
  EXPECT_EQ(b_->messages.back().abort().plans_sent(), 1u);
}

TEST_F(CoordinatorTest, MisaddressedLaneMessagesChangeNothing) {
  Join();
  RecordingLane lane;
  c_.UseLane(&lane);
  c_.OnReady(ida_, ReadyOf({Meta("x")}));
  c_.OnLaneMessage(7, LaneReady({Meta("x")}));   // no such node
  c_.OnLaneMessage(-1, LaneReady({Meta("x")}));  // nor this
  EXPECT_TRUE(lane.sent.empty());
  EXPECT_TRUE(a_->plans().empty());
  EXPECT_FALSE(c_.aborted());
}

TEST_F(CoordinatorTest, AnUnreadableLaneMessageEndsTheJobNamingItsNode) {
  for (bool hello : {false, true}) {
    Coordinator c{"job", "tok", 4, CoordinatorOptions{64 << 20, 4}};
    auto a = std::make_shared<RecordingSink>(), b = std::make_shared<RecordingSink>();
    ASSERT_TRUE(c.AddMember(Hello("A", {0, 1}), a).ok());
    ASSERT_TRUE(c.AddMember(Hello("B", {2, 3}), b).ok());
    kolo::v1::MemberMessage m;
    *m.mutable_hello() = Hello("B", {2, 3});
    // Garbage, or a message other than a Ready (only reports travel there).
    c.OnLaneMessage(1, hello ? m.SerializeAsString() : "\xff\xff garbage");
    EXPECT_TRUE(c.aborted());
    ASSERT_FALSE(a->messages.empty());
    ASSERT_TRUE(a->messages.back().has_abort());
    EXPECT_TRUE(absl::StrContains(a->messages.back().abort().reason(), "(node B)"))
        << a->messages.back().abort().reason();
  }
}

}  // namespace
}  // namespace kolo::daemon
