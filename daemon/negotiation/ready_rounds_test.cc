#include "daemon/negotiation/ready_rounds.h"

#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

TEST(IdBitsTest, RoundTripsAndRefusesTooMany) {
  IdSet ids = {0, 7, 8, 100};
  IdSet back;
  ASSERT_TRUE(ParseIdBits(IdBits(ids), &back).ok());
  EXPECT_EQ(back, ids);
  EXPECT_EQ(IdBits({}), "");
  EXPECT_FALSE(ParseIdBits(std::string(kMaxDirectIds / 8 + 1, '\1'), &back).ok());
}

// Two nodes, by hand: a name ready on both runs at the close of the round
// both sent, and the node that got it last runs it without a round trip.
TEST(ReadyRoundsTest, TheLastNodeRunsAtOnceAndTheFirstHolds) {
  ReadyRounds a(2, 0, 0), b(2, 1, 0);
  a.AddReady(3);
  ReadyRounds::Output out = a.Pump();
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_TRUE(out.events.empty());
  ASSERT_TRUE(b.Receive(0, out.messages[0]).ok());
  // b has nothing of it yet: it holds its message.
  EXPECT_TRUE(b.Pump().messages.empty());
  b.AddReady(3);
  ReadyRounds::Output bo = b.Pump();
  ASSERT_EQ(bo.messages.size(), 1u);
  ASSERT_EQ(bo.events.size(), 1u);
  EXPECT_EQ(bo.events[0].kind, ReadyRounds::Event::Kind::kRun);
  EXPECT_EQ(bo.events[0].ids, std::vector<uint32_t>{3});
  ASSERT_TRUE(a.Receive(1, bo.messages[0]).ok());
  ReadyRounds::Output ao = a.Pump();
  ASSERT_EQ(ao.events.size(), 1u);
  EXPECT_EQ(ao.events[0].ids, std::vector<uint32_t>{3});
  EXPECT_EQ(a.round(), 1u);
  EXPECT_EQ(b.round(), 1u);
}

TEST(ReadyRoundsTest, ABrokenPeerIsAnError) {
  ReadyRounds a(2, 0, 0);
  kolo::v1::ReadyRound m;
  m.set_round(5);
  EXPECT_FALSE(a.Receive(1, m).ok());  // a round far ahead
  m.set_round(0);
  m.set_plans(3);
  EXPECT_FALSE(a.Receive(1, m).ok());  // Plans from a member
  m.set_plans(0);
  EXPECT_TRUE(a.Receive(1, m).ok());
  EXPECT_FALSE(a.Receive(1, m).ok());  // the same round twice
  EXPECT_FALSE(a.Receive(0, m).ok());  // from itself
  EXPECT_FALSE(a.Receive(2, m).ok());  // no such node
}

// A simulated job: `nodes` nodes make `ids` names ready `steps` times each,
// in an order of their own; the network delivers messages in any order;
// the coordinator (on node `plans_node`) takes what was spilled or left
// and plans it. Every node must log the same runs and releases, and every
// name must run `steps` times on every node.
struct SimConfig {
  int nodes = 2;
  int ids = 6;
  int steps = 5;
  int plans_node = 0;
  double spill_chance = 0;  // per readiness, a changed name
  int leave_at = -1;        // node 1 leaves after this many of its readies
};

struct SimNode {
  std::unique_ptr<ReadyRounds> rounds;
  std::vector<std::string> log;
  std::vector<int> left;    // submissions still to make, by id
  std::vector<bool> ready;  // an instance in flight, by id
  std::vector<int> done;    // by id
  uint64_t released = 0;    // plans run
  int readies = 0;
};

class Sim {
 public:
  Sim(SimConfig config, uint32_t seed) : c_(config), rng_(seed) {
    for (int n = 0; n < c_.nodes; ++n) {
      SimNode node;
      node.rounds = std::make_unique<ReadyRounds>(c_.nodes, n, c_.plans_node);
      node.left.assign(c_.ids, c_.steps);
      node.ready.assign(c_.ids, false);
      node.done.assign(c_.ids, 0);
      nodes_.push_back(std::move(node));
    }
    reported_.assign(c_.ids, 0);
  }

  void Run() {
    for (int iter = 0; iter < 1000000; ++iter) {
      std::vector<std::pair<int, int>> can_ready;  // node, id
      for (int n = 0; n < c_.nodes; ++n) {
        for (int id = 0; id < c_.ids; ++id) {
          if (nodes_[n].left[id] > 0 && !nodes_[n].ready[id]) can_ready.push_back({n, id});
        }
      }
      if (can_ready.empty() && wire_.empty()) return;
      const bool deliver = !wire_.empty() && (can_ready.empty() || Coin(0.6));
      if (deliver) {
        std::uniform_int_distribution<size_t> pick(0, wire_.size() - 1);
        const size_t i = pick(rng_);
        Wire w = wire_[i];
        wire_.erase(wire_.begin() + static_cast<long>(i));
        ASSERT_TRUE(nodes_[w.to].rounds->Receive(w.from, w.message).ok());
      } else {
        std::uniform_int_distribution<size_t> pick(0, can_ready.size() - 1);
        auto [n, id] = can_ready[pick(rng_)];
        MakeReady(n, id);
      }
      Settle();
    }
    FAIL() << "the simulation did not settle";
  }

  void Check() {
    for (int n = 0; n < c_.nodes; ++n) {
      EXPECT_EQ(nodes_[n].log, nodes_[0].log) << "node " << n << " ran another order";
      for (int id = 0; id < c_.ids; ++id) {
        EXPECT_EQ(nodes_[n].done[id], c_.steps) << "node " << n << " id " << id;
      }
    }
  }

  int plans() const { return static_cast<int>(plans_.size()); }
  bool off() const { return nodes_[0].rounds->off(); }

 private:
  struct Wire {
    int from, to;
    kolo::v1::ReadyRound message;
  };

  bool Coin(double p) { return std::bernoulli_distribution(p)(rng_); }

  void MakeReady(int n, int id) {
    SimNode& node = nodes_[n];
    node.ready[id] = true;
    --node.left[id];
    ++node.readies;
    if (n == 1 && node.readies == c_.leave_at) node.rounds->Leave();
    if (!node.rounds->Takes(id)) {
      ToCoordinator(id);
    } else if (Coin(c_.spill_chance)) {
      node.rounds->Spill(id);
      ToCoordinator(id);
    } else {
      node.rounds->AddReady(id);
    }
  }

  // A node reports `id` in full; once every node has, it is planned.
  void ToCoordinator(int id) {
    if (++reported_[id] < c_.nodes) return;
    reported_[id] = 0;
    plans_.push_back(id);
    nodes_[c_.plans_node].rounds->PlansSeen(plans_.size());
  }

  // Pumps every node until none has anything more to do.
  void Settle() {
    for (bool busy = true; busy;) {
      busy = false;
      for (int n = 0; n < c_.nodes; ++n) busy = Pump(n) || busy;
    }
  }

  // Whether node `n` sent or applied anything.
  bool Pump(int n) {
    SimNode& node = nodes_[n];
    ReadyRounds::Output out = node.rounds->Pump();
    bool busy = !out.messages.empty() || !out.events.empty();
    std::vector<int> spilled;
    for (const auto& m : out.messages) {
      for (int to = 0; to < c_.nodes; ++to) {
        if (to != n) wire_.push_back({n, to, m});
      }
    }
    for (const auto& e : out.events) {
      switch (e.kind) {
        case ReadyRounds::Event::Kind::kReleasePlans:
          for (; node.released < e.plans; ++node.released) {
            const int id = plans_[node.released];
            node.log.push_back(absl::StrCat("plan ", node.released, ": ", id));
            Done(n, id);
          }
          break;
        case ReadyRounds::Event::Kind::kRun:
          node.log.push_back(absl::StrCat("run ", absl::StrJoin(e.ids, ",")));
          for (uint32_t id : e.ids) Done(n, static_cast<int>(id));
          break;
        case ReadyRounds::Event::Kind::kSpill:
          for (uint32_t id : e.ids) spilled.push_back(static_cast<int>(id));
          break;
        case ReadyRounds::Event::Kind::kOff:
          node.log.push_back("off");
          // From here the coordinator's Plans run as they come.
          break;
      }
    }
    // Reported once the events are applied, as the negotiator does.
    for (int id : spilled) ToCoordinator(id);
    if (node.rounds->off()) {
      for (; node.released < plans_.size(); ++node.released) {
        node.log.push_back(absl::StrCat("plan ", node.released, ": ", plans_[node.released]));
        Done(n, plans_[node.released]);
        busy = true;
      }
    }
    return busy;
  }

  void Done(int n, int id) {
    SimNode& node = nodes_[n];
    ASSERT_TRUE(node.ready[id]) << "node " << n << " ran id " << id << " it did not have";
    node.ready[id] = false;
    ++node.done[id];
  }

  const SimConfig c_;
  std::mt19937 rng_;
  std::vector<SimNode> nodes_;
  std::vector<Wire> wire_;
  std::vector<int> reported_;
  std::vector<int> plans_;  // the id each Plan runs
};

void RunMany(const SimConfig& config, int seeds) {
  for (int seed = 1; seed <= seeds; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    Sim sim(config, static_cast<uint32_t>(seed));
    sim.Run();
    sim.Check();
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(ReadyRoundsSimTest, TwoNodesAgreeAndFinish) { RunMany({2, 6, 5, 0, 0, -1}, 400); }

TEST(ReadyRoundsSimTest, ThreeNodesAgreeAndFinish) { RunMany({3, 5, 4, 0, 0, -1}, 400); }

TEST(ReadyRoundsSimTest, FourNodesWithTheCoordinatorElsewhere) {
  RunMany({4, 4, 3, 2, 0, -1}, 200);
}

TEST(ReadyRoundsSimTest, ChangedNamesGoToTheCoordinatorAlike) {
  RunMany({3, 5, 4, 0, 0.15, -1}, 400);
}

TEST(ReadyRoundsSimTest, ALeavingNodeTakesEveryoneToTheCoordinator) {
  for (int seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    Sim sim({3, 4, 4, 1, 0, 5}, static_cast<uint32_t>(seed));
    sim.Run();
    sim.Check();
    EXPECT_TRUE(sim.off());
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace kolo::daemon
