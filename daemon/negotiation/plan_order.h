// PlanOrder: the order in which one node runs what its job planned while
// direct rounds (ready_rounds.h) run beside the coordinator. Two sources
// feed it: the coordinator's plans, numbered as they arrive, and what the
// rounds decided, in round order: a release (the coordinator's plans before
// a given number run next; the coordinator's node counts them in its round
// messages) or a round's own entries. Every node gets the same releases and
// entries in the same order, so every node interleaves the two sources the
// same way. A plan that arrived before its release waits for it; a release
// whose plan is still on its way holds everything behind it.
//
// Ungated (no rounds, or once they ended) a plan runs as it arrives, after
// whatever the rounds ordered before.
//
// Thread-safety: thread-compatible (the negotiator's lock guards it).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <variant>
#include <vector>

#include "daemon/wire/member_link.h"

namespace kolo::daemon {

// The coordinator's plans numbered below `plans_before` run next.
struct PlanRelease {
  uint64_t plans_before = 0;
};

// What a round's close adds to the order: a release, or the entries the
// round planned here.
using RoundStep = std::variant<PlanRelease, std::vector<PlannedEntry>>;

class PlanOrder {
 public:
  // Plans wait for their release from now on (the rounds started).
  void Gate() { gated_ = true; }
  // The rounds ended: plans run as they arrive, after what is ordered.
  void Ungate() { gated_ = false; }
  // The coordinator's next plan (they come in order); returns how many
  // arrived so far.
  uint64_t AddPlan(std::vector<PlannedEntry> plan);
  // A round's step goes next in the order. A release never lowers the
  // bound (a smaller count releases nothing more); it allocates nothing
  // however large its count.
  void Add(RoundStep step);
  // Moves what may run now, in order, to the back of `out`.
  void Drain(std::deque<PlannedEntry>* out);
  // Whether something arrived or was ordered that cannot run yet.
  bool pending() const { return !order_.empty() || !arrived_.empty(); }

 private:
  // Moves plan number next_plan_ to `out`; false while it is on its way.
  bool TakeNextPlan(std::deque<PlannedEntry>* out);

  std::deque<RoundStep> order_;
  // The coordinator's plans received, by number, not yet drained.
  std::map<uint64_t, std::vector<PlannedEntry>> arrived_;
  uint64_t plans_in_ = 0;   // received
  uint64_t next_plan_ = 0;  // the next to drain
  bool gated_ = false;
};

}  // namespace kolo::daemon
