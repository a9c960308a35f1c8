// An elastic job's membership across two nodes, in one process: each node's
// ElasticGroup reports its waiting ranks to the membership leader (an
// ElasticLeaders, reached through a fake Peer.Rendezvous), which numbers the
// epoch over both; losing a member node, and losing the leader's node.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/backend/fake_backend.h"
#include "daemon/job/elastic_group.h"
#include "daemon/job/elastic_test_jobs.h"
#include "daemon/elastic/elastic_leader.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

// Routes a node's Rendezvous call to the leaders of the daemon at the
// address; an address marked down answers UNAVAILABLE.
class FakePeers final : public RendezvousCaller {
 public:
  explicit FakePeers(absl::Duration lost_after) {
    for (const char* node : {"a", "b"}) {
      ElasticLeaderOptions o;
      o.lost_after = lost_after;
      o.poll = absl::Milliseconds(100);
      leaders_[std::string(node) + ":1"] = std::make_unique<ElasticLeaders>(o);
    }
  }
  absl::StatusOr<kolo::v1::ElasticFormed> Call(const std::string& address,
                                               const kolo::v1::ElasticReport& report) override {
    {
      absl::MutexLock l(&mu_);
      if (down_.count(address) > 0) return absl::UnavailableError(address + " is down");
    }
    auto it = leaders_.find(address);
    if (it == leaders_.end()) return absl::UnavailableError("no daemon at " + address);
    return it->second->Report(report);
  }
  void Down(const std::string& address) {
    absl::MutexLock l(&mu_);
    down_.insert(address);
  }

 private:
  std::map<std::string, std::unique_ptr<ElasticLeaders>> leaders_;
  absl::Mutex mu_;
  std::set<std::string> down_ ABSL_GUARDED_BY(mu_);
};

class ElasticNodesTest : public ::testing::Test {
 protected:
  std::unique_ptr<ElasticGroup> Node(const std::string& node) {
    return std::make_unique<ElasticGroup>(
        "elastic", "token", TestEpochJobs(&host_), absl::Seconds(10),
        Spanning{&peers_, node, node + ":1", "a:1", /*local_size=*/2});
  }
  static ElasticJoin Initial(const std::string& node, int hint) {
    ElasticJoin j;
    j.session_id = node + "-" + std::to_string(hint);
    j.pid = 100 + hint;
    j.hint_rank = hint;
    j.size = 4;
    j.min_size = 1;
    return j;
  }
  static ElasticJoin Survivor(const ElasticSeat& seat, const std::string& node) {
    ElasticJoin j = Initial(node, seat.rank);
    j.session_id += "-e" + std::to_string(seat.epoch + 1);
    j.previous_rank = seat.rank;
    j.previous_epoch = seat.epoch;
    return j;
  }
  // Joins every (group, join) at once and returns the seats in order.
  static std::vector<absl::StatusOr<ElasticSeat>> JoinAll(
      const std::vector<std::pair<ElasticGroup*, ElasticJoin>>& joins) {
    std::vector<absl::StatusOr<ElasticSeat>> seats(joins.size(), absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    for (size_t i = 0; i < joins.size(); ++i) {
      threads.emplace_back([&, i] {
        seats[i] = joins[i].first->Join(joins[i].second, deadline, [] { return false; });
      });
    }
    for (std::thread& t : threads) t.join();
    return seats;
  }

  FakeBackend host_;
  FakePeers peers_{absl::Milliseconds(300)};
};

TEST_F(ElasticNodesTest, TheEpochsSpanBothNodesAndALostMemberNodeIsLeftOut) {
  auto a = Node("a"), b = Node("b");
  auto seats = JoinAll({{b.get(), Initial("b", 2)},
                        {a.get(), Initial("a", 0)},
                        {b.get(), Initial("b", 3)},
                        {a.get(), Initial("a", 1)}});
  for (const auto& s : seats) ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(seats[1]->rank, 0);
  EXPECT_EQ(seats[3]->rank, 1);
  EXPECT_EQ(seats[0]->rank, 2);
  EXPECT_EQ(seats[2]->rank, 3);
  EXPECT_EQ(seats[0]->size, 4);
  EXPECT_EQ(seats[0]->local_rank, 0);
  EXPECT_EQ(seats[2]->local_rank, 1);
  EXPECT_EQ(seats[2]->local_size, 2);
  EXPECT_EQ(seats[0]->epoch, 1u);

  // Node b is lost (its daemon died): a's ranks saw their epoch fail and
  // reset; b never reports, and after the loss time epoch 2 forms on a.
  peers_.Down("b:1");
  auto next = JoinAll({{a.get(), Survivor(*seats[3], "a")}, {a.get(), Survivor(*seats[1], "a")}});
  for (const auto& s : next) ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(next[1]->rank, 0);
  EXPECT_EQ(next[0]->rank, 1);
  EXPECT_EQ(next[0]->size, 2);
  EXPECT_EQ(next[0]->epoch, 2u);
  std::vector<EpochRecord> history = a->History();
  ASSERT_EQ(history.size(), 2u);
  EXPECT_NE(history[1].reason.find("node(s) b lost"), std::string::npos) << history[1].reason;
}

TEST_F(ElasticNodesTest, LosingTheLeadersNodeOfTwoIsRefused) {
  auto a = Node("a"), b = Node("b");
  auto seats = JoinAll({{a.get(), Initial("a", 0)},
                        {a.get(), Initial("a", 1)},
                        {b.get(), Initial("b", 2)},
                        {b.get(), Initial("b", 3)}});
  for (const auto& s : seats) ASSERT_TRUE(s.ok()) << s.status();
  // Node a (the leader) is lost: b reports to its successor (itself), which
  // holds half the nodes without the old leader: no epoch.
  peers_.Down("a:1");
  auto next = JoinAll({{b.get(), Survivor(*seats[2], "b")}, {b.get(), Survivor(*seats[3], "b")}});
  for (const auto& s : next) {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
    EXPECT_NE(s.status().message().find("strict majority"), absl::string_view::npos) << s.status();
  }
}

}  // namespace
}  // namespace kolo::daemon
