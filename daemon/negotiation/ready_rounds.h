// ReadyRounds: the direct rounds of a job across nodes (step 8 of
// proto/kolo/v1/peer.proto). Once every node has a name cached, the nodes
// need no coordinator to agree that it is ready everywhere: each sends the
// others its ready cache bits over the data plane, and a name runs once
// every node's message of one round holds it. A repeated step then costs one
// message each way instead of a report to the coordinator and a plan back.
//
// The rules, and why they can neither deadlock nor reorder:
//   - Rounds are numbered. A node sends exactly one message per round, with
//     its whole state (every cached name ready here and not yet run), and
//     the next round's only after it has every node's message of this one.
//     So every node closes round k on the same n messages, and the close is
//     a function of them alone: the names all of them hold run, in cache-id
//     order, fused by the shared rule (the negotiator does that part). Every
//     node runs the same responses in the same order.
//   - The coordinator's Plans (names seen for the first time, a changed
//     name, process sets, joins) merge into that order through the
//     coordinator's node: its message of round k says how many Plans it had
//     (P_k), and every node runs Plans up to P_k after round k-1's names and
//     before round k's. The coordinator's node learns of its Plans in
//     process, so it never waits for them; a member waits for a Plan it has
//     not received yet, never for a message that is not coming.
//   - When to send: at once when this node's state changed since its last
//     message (a name became ready, a spill, a join, new Plans). A node that
//     received a round's message but has nothing new holds its own, so that
//     a name still on its way here runs at this round's close instead of a
//     round trip later, unless replying would run something: the names its
//     own state shares with every other node's latest message (a lower
//     bound of their states, which only grow between closes), or news in a
//     message (Plans, a spill, a leave, a nudge). A node whose state changes
//     after it sent its message nudges the others (once a round), and a
//     nudge is a reason to reply. So a name ready on every node is never
//     left waiting: either some node's state changed (it sends or nudges,
//     the others reply) or every holder sees the name in the bound.
//   - A name whose metadata changed on a node goes to the coordinator in
//     full there, and the node's next message spills its id: at that
//     round's close every node moves the name to the coordinator, for good
//     (a node that holds it reports it there), so the coordinator sees every
//     node's report and rules on the disagreement as it always has. A join
//     (a node whose ranks all joined) takes the whole job back to the
//     coordinator the same way: the joined node's message says so, and at
//     the close every node reports what it holds and stops the rounds.
//   - The response cache never evicts (a full cache gives no more ids), so
//     a name's id means the same on every node for the job's life.
//
// This class is the protocol alone: inputs (names ready here, messages from
// the other nodes, the coordinator's Plans) in, messages to send and events
// to apply out, in order. The negotiator (peer_negotiator.h) moves them.
//
// Thread-safety: not thread-safe; the negotiator's lock guards it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon {

// Cache ids at or above this bound stay with the coordinator (a round's
// bits must fit one small message).
inline constexpr uint32_t kMaxDirectIds = 1 << 16;

using IdSet = absl::btree_set<uint32_t>;

// `ids` as bits (bit i of byte i / 8), and back (an error for bits past
// kMaxDirectIds).
std::string IdBits(const IdSet& ids);
absl::Status ParseIdBits(const std::string& bits, IdSet* ids);

class ReadyRounds {
 public:
  struct Event {
    enum class Kind {
      kReleasePlans,  // the coordinator's Plans up to `plans` (a count) run next
      kRun,           // `ids` ran here (ascending): plan them, in that order
      kSpill,         // `ids`, ready here, go to the coordinator now
      kOff,           // the rounds ended: everything goes to the coordinator
    };
    Kind kind = Kind::kRun;
    uint64_t plans = 0;
    std::vector<uint32_t> ids;
  };
  struct Output {
    // To every other node, in this order.
    std::vector<kolo::v1::ReadyRound> messages;
    std::vector<Event> events;
  };

  // `nodes` in the job, `self` this node's index, `plans_node` the
  // coordinator's node.
  ReadyRounds(int nodes, int self, int plans_node);

  bool off() const { return off_; }
  // Whether `id` may go in a round (not spilled, under the bound, rounds on).
  bool Takes(uint32_t id) const;
  // Cached name `id` is ready here (Takes(id), not already ready).
  void AddReady(uint32_t id);
  // Cached name `id` went to the coordinator in full here.
  void Spill(uint32_t id);
  // This node leaves the rounds (its ranks all joined).
  void Leave();
  // On the coordinator's node: it has received `plans` Plans.
  void PlansSeen(uint64_t plans);
  // Another node's message. An error is a broken protocol (the job ends).
  absl::Status Receive(int from, const kolo::v1::ReadyRound& message);
  // What is due now: the messages to send and the events, in order.
  Output Pump();

  uint64_t round() const { return round_; }
  // For stall reports: the nodes whose latest message lacked `id`.
  std::vector<int> NodesWithout(uint32_t id) const;

 private:
  struct Received {
    IdSet ready;
    IdSet spill;
    bool off = false;
    uint64_t plans = 0;
  };
  struct Slot {
    std::vector<std::optional<Received>> from;  // by node
    bool nudged = false;
  };

  Slot& SlotOf(uint64_t round) { return round == round_ ? current_ : next_; }
  // Whether replying now would run something or carries news.
  bool ReplyDue() const;
  void Send(Output* out);
  bool Complete() const;
  void Close(Output* out);

  const int nodes_;
  const int self_;
  const int plans_node_;
  uint64_t round_ = 0;
  Slot current_, next_;
  bool sent_ = false;    // this node's message of round_
  bool nudged_ = false;  // this node's nudge of round_
  bool dirty_ = false;   // the state changed since this node's last message
  IdSet state_;          // ready here, not yet run
  IdSet spill_out_;      // to spill in the next message
  bool leave_out_ = false;
  IdSet spilled_;  // for good
  bool off_ = false;
  // Lower bounds of the other nodes' states (their last closed message,
  // less what ran or left since).
  std::vector<IdSet> known_;
  uint64_t plans_seen_ = 0;         // on the coordinator's node
  uint64_t released_ = 0;           // Plans released so far
  uint64_t released_at_start_ = 0;  // ... when round_ began
};

}  // namespace kolo::daemon
