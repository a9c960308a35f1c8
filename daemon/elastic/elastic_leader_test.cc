// The membership leader of elastic jobs across nodes: how it forms epochs
// from the nodes' reports, counts lost nodes and refuses an epoch without a
// quorum (ElasticLeader).
#include "daemon/elastic/elastic_leader.h"

#include <string>
#include <thread>
#include <vector>

#include "common/testing/wait_until.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

using kolo::v1::ElasticFormed;
using kolo::v1::ElasticReport;

ElasticLeaderOptions Options(absl::Duration lost_after = absl::Milliseconds(200)) {
  ElasticLeaderOptions o;
  o.lost_after = lost_after;
  o.poll = absl::Seconds(3);
  return o;
}

ElasticReport Report(const std::string& node, int initial_size = 0) {
  ElasticReport r;
  r.set_job_id("job");
  r.set_job_token("token");
  r.set_node(node);
  r.set_address(node + ":7371");
  r.set_initial_size(initial_size);
  r.set_min_size(1);
  return r;
}

void AddFirst(ElasticReport* r, int hint) {
  auto* c = r->add_candidates();
  c->set_id(absl::StrCat(r->node(), "-", hint));
  c->set_previous_rank(-1);
  c->set_hint_rank(hint);
  c->set_arrival(hint);
}

void AddSurvivor(ElasticReport* r, int previous_rank, uint64_t epoch) {
  auto* c = r->add_candidates();
  c->set_id(absl::StrCat(r->node(), "-s", previous_rank));
  c->set_previous_rank(previous_rank);
  c->set_previous_epoch(epoch);
}

void AddJoiner(ElasticReport* r, int n) {
  auto* c = r->add_candidates();
  c->set_id(absl::StrCat(r->node(), "-j", n));
  c->set_previous_rank(-1);
  c->set_joiner(true);
  c->set_arrival(n);
}

// Marks `r` as leaving `epoch` of `formed`'s nodes.
void Ended(ElasticReport* r, const ElasticFormed& formed) {
  r->set_ended_epoch(formed.epoch());
  r->set_epoch_ended(true);
  for (const auto& n : formed.nodes()) *r->add_ended_nodes() = n;
  r->set_ended_leader(formed.leader());
}

// Runs every report at once (each node polls on its own thread).
std::vector<absl::StatusOr<ElasticFormed>> ReportAll(ElasticLeader& leader,
                                                     const std::vector<ElasticReport>& reports) {
  std::vector<absl::StatusOr<ElasticFormed>> out(reports.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reports.size(); ++i) {
    threads.emplace_back([&, i] { out[i] = leader.Report(reports[i]); });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::vector<int> Ranks(const ElasticFormed& f) {
  std::vector<int> ranks;
  for (const auto& p : f.placements()) ranks.push_back(p.rank());
  return ranks;
}

// Two nodes of two ranks each form the first epoch; returns a's and b's.
std::pair<ElasticFormed, ElasticFormed> FirstEpoch(ElasticLeader& leader) {
  ElasticReport a = Report("a", 4), b = Report("b", 4);
  AddFirst(&a, 0);
  AddFirst(&a, 1);
  AddFirst(&b, 2);
  AddFirst(&b, 3);
  auto got = ReportAll(leader, {b, a});
  EXPECT_TRUE(got[0].ok() && got[1].ok());
  return {*got[1], *got[0]};
}

TEST(ElasticLeaderTest, TheFirstEpochFormsAcrossNodesInTheAskedOrder) {
  ElasticLeader leader("job", "token", Options());
  auto [a, b] = FirstEpoch(leader);
  EXPECT_EQ(a.epoch(), 1u);
  EXPECT_EQ(a.size(), 4);
  EXPECT_EQ(Ranks(a), (std::vector<int>{0, 1}));
  EXPECT_EQ(Ranks(b), (std::vector<int>{2, 3}));
  EXPECT_EQ(a.coordinator(), "a:7371");
  EXPECT_EQ(b.leader(), "a");
  ASSERT_EQ(b.nodes_size(), 2);
  EXPECT_EQ(b.nodes(0).node(), "a");
}

TEST(ElasticLeaderTest, ALostMemberNodeIsLeftOutAfterTheTimeout) {
  ElasticLeader leader("job", "token", Options());
  auto [a1, b1] = FirstEpoch(leader);
  ElasticReport a = Report("a");
  Ended(&a, a1);
  a.set_reason("rank 2 died");
  AddSurvivor(&a, 0, 1);
  AddSurvivor(&a, 1, 1);
  const absl::Time start = absl::Now();
  absl::StatusOr<ElasticFormed> got = leader.Report(a);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(150)) << "waits for node b first";
  EXPECT_EQ(got->epoch(), 2u);
  EXPECT_EQ(got->size(), 2);
  EXPECT_EQ(Ranks(*got), (std::vector<int>{0, 1}));
  EXPECT_NE(got->reason().find("node(s) b lost"), std::string::npos) << got->reason();
}

TEST(ElasticLeaderTest, PollingAgainDoesNotPostponeTheLoss) {
  // Each poll answers "not yet" after 50 ms; the node polls again and again
  // with the same report, which must not restart the lost node's clock.
  ElasticLeaderOptions o = Options(absl::Milliseconds(300));
  o.poll = absl::Milliseconds(50);
  ElasticLeader leader("job", "token", o);
  auto [a1, b1] = FirstEpoch(leader);
  ElasticReport a = Report("a");
  Ended(&a, a1);
  AddSurvivor(&a, 0, 1);
  AddSurvivor(&a, 1, 1);
  const absl::Time start = absl::Now();
  absl::StatusOr<ElasticFormed> got;
  int polls = 0;
  do {
    got = leader.Report(a);
    ASSERT_TRUE(got.ok()) << got.status();
    ++polls;
  } while (got->epoch() == 0 && absl::Now() - start < absl::Seconds(5));
  EXPECT_EQ(got->epoch(), 2u);
  EXPECT_GT(polls, 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(ElasticLeaderTest, ANodeWhoseDaemonRefusesConnectionsIsNotWaitedFor) {
  ElasticLeaderOptions o = Options(absl::Seconds(30));
  std::vector<std::string> asked;
  o.refuses = [&asked](const std::string& address) {
    asked.push_back(address);
    return address == "b:7371";
  };
  ElasticLeader leader("job", "token", o);
  auto [a1, b1] = FirstEpoch(leader);
  ElasticReport a = Report("a");
  Ended(&a, a1);
  AddSurvivor(&a, 0, 1);
  const absl::Time start = absl::Now();
  absl::StatusOr<ElasticFormed> got = leader.Report(a);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->epoch(), 2u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "not the 30 s loss time";
  EXPECT_EQ(asked, (std::vector<std::string>{"b:7371"})) << "asked once, only the silent node";
}

TEST(ElasticLeaderTest, JoinersAloneDoNotCarryOnAJobWhoseRanksAreGone) {
  ElasticLeader leader("job", "token", Options());
  auto [a1, b1] = FirstEpoch(leader);
  ElasticReport a = Report("a");
  Ended(&a, a1);
  AddJoiner(&a, 1);
  ElasticReport b = Report("b");
  Ended(&b, a1);
  AddJoiner(&b, 2);
  auto got = ReportAll(leader, {a, b});
  for (const auto& g : got) {
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition) << g.status();
    EXPECT_NE(g.status().message().find("no rank left"), std::string::npos) << g.status();
  }
}

TEST(ElasticLeaderTest, ASuccessorOfTwoNodesRefusesWithoutTheLeader) {
  ElasticLeader first("job", "token", Options());
  auto [a1, b1] = FirstEpoch(first);
  // Node a (the leader) is gone; b's daemon takes over with its own leader.
  ElasticLeader successor("job", "token", Options());
  ElasticReport b = Report("b");
  Ended(&b, b1);
  AddSurvivor(&b, 2, 1);
  AddSurvivor(&b, 3, 1);
  absl::StatusOr<ElasticFormed> got = successor.Report(b);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(got.status().message().find("strict majority"), std::string::npos) << got.status();
}

TEST(ElasticLeaderTest, ASuccessorWithAMajorityGoesOn) {
  ElasticLeader first("job", "token", Options());
  ElasticReport a = Report("a", 3), b = Report("b", 3), c = Report("c", 3);
  AddFirst(&a, 0);
  AddFirst(&b, 1);
  AddFirst(&c, 2);
  auto formed = ReportAll(first, {a, b, c});
  ASSERT_TRUE(formed[1].ok() && formed[2].ok());
  ElasticLeader successor("job", "token", Options());
  ElasticReport b2 = Report("b"), c2 = Report("c");
  Ended(&b2, *formed[1]);
  Ended(&c2, *formed[2]);
  AddSurvivor(&c2, 2, 1);
  AddSurvivor(&b2, 1, 1);
  auto got = ReportAll(successor, {c2, b2});
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  ASSERT_TRUE(got[1].ok()) << got[1].status();
  EXPECT_EQ(got[1]->epoch(), 2u);
  EXPECT_EQ(Ranks(*got[1]), std::vector<int>{0}) << "old rank 1 leads";
  EXPECT_EQ(Ranks(*got[0]), std::vector<int>{1});
  EXPECT_EQ(got[0]->leader(), "b");
}

TEST(ElasticLeaderTest, JoinersWaitForTheResetAndComeLast) {
  ElasticLeader leader("job", "token", Options());
  auto [a1, b1] = FirstEpoch(leader);
  ElasticReport c = Report("c");
  AddJoiner(&c, 0);
  c.set_ended_epoch(0);
  absl::StatusOr<ElasticFormed> joined;
  std::thread joiner([&] {
    // Polls as a node does until its joiner has a seat.
    for (int i = 0; i < 20; ++i) {
      joined = leader.Report(c);
      if (!joined.ok() || joined->epoch() != 0) return;
    }
  });
  // The leader holds c's joiner before the survivors report.
  EXPECT_TRUE(WaitUntil([&] { return leader.JoinersWaiting(absl::Now(), "a") == 1; },
                        absl::Seconds(20)));
  ElasticReport a = Report("a"), b = Report("b");
  Ended(&a, a1);
  Ended(&b, b1);
  for (int r : {0, 1}) AddSurvivor(&a, r, 1);
  for (int r : {2, 3}) AddSurvivor(&b, r, 1);
  auto got = ReportAll(leader, {a, b});
  joiner.join();
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->epoch(), 2u);
  EXPECT_EQ(Ranks(*joined), std::vector<int>{4});
  EXPECT_EQ(joined->size(), 5);
  ASSERT_TRUE(got[1].ok());
  EXPECT_EQ(Ranks(*got[1]), (std::vector<int>{2, 3}));
}

TEST(ElasticLeaderTest, BadReportsAreRefused) {
  ElasticLeaders leaders(Options());
  ElasticReport r = Report("a", 1);
  r.set_job_id("no spaces allowed");
  EXPECT_EQ(leaders.Report(r).status().code(), absl::StatusCode::kInvalidArgument);
  r = Report("a", 1);
  auto* c = r.add_candidates();
  c->set_id(std::string(65, 'x'));
  EXPECT_EQ(leaders.Report(r).status().code(), absl::StatusCode::kInvalidArgument);
  r = Report("a", -1);
  EXPECT_EQ(leaders.Report(r).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ElasticLeaderTest, UnusableAnswersAreRefusedByTheNode) {
  ElasticLeader leader("job", "token", Options());
  auto [a, b] = FirstEpoch(leader);
  EXPECT_TRUE(ValidateElasticFormed(a, "a").ok());
  EXPECT_TRUE(ValidateElasticFormed(ElasticFormed(), "a").ok()) << "epoch 0: not yet";
  ElasticFormed bad = a;
  bad.set_size(0);
  EXPECT_FALSE(ValidateElasticFormed(bad, "a").ok());
  bad = a;
  bad.set_size(1 << 30);
  EXPECT_FALSE(ValidateElasticFormed(bad, "a").ok());
  bad = a;
  bad.mutable_placements(0)->set_rank(7);
  EXPECT_FALSE(ValidateElasticFormed(bad, "a").ok()) << "rank out of range";
  bad = a;
  bad.mutable_placements(1)->set_rank(bad.placements(0).rank());
  EXPECT_FALSE(ValidateElasticFormed(bad, "a").ok()) << "rank placed twice";
  bad = a;
  bad.mutable_nodes(1)->set_ranks(0, 0);
  EXPECT_FALSE(ValidateElasticFormed(bad, "a").ok()) << "rank on two nodes";
  bad = a;
  bad.clear_coordinator();
  EXPECT_FALSE(ValidateElasticFormed(bad, "a").ok()) << "no coordinator across nodes";
  EXPECT_FALSE(ValidateElasticFormed(a, "b").ok()) << "a's ranks placed on node b";
  bad = a;
  bad.mutable_nodes()->RemoveLast();
  EXPECT_FALSE(ValidateElasticFormed(bad, "a").ok()) << "ranks on no node";
}

}  // namespace
}  // namespace kolo::daemon
