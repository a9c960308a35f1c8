#include "daemon/negotiation/ready_rounds.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kolo::daemon {

std::string IdBits(const IdSet& ids) {
  std::string bits;
  if (!ids.empty()) bits.assign(*ids.rbegin() / 8 + 1, '\0');
  for (uint32_t id : ids) bits[id / 8] = static_cast<char>(bits[id / 8] | (1 << (id % 8)));
  return bits;
}

absl::Status ParseIdBits(const std::string& bits, IdSet* ids) {
  ids->clear();
  if (bits.size() > kMaxDirectIds / 8) {
    return absl::InvalidArgumentError(absl::StrCat("a round's bits of ", bits.size(),
                                                   " bytes (at most ", kMaxDirectIds / 8, ")"));
  }
  for (size_t byte = 0; byte < bits.size(); ++byte) {
    const auto b = static_cast<uint8_t>(bits[byte]);
    for (int i = 0; i < 8; ++i) {
      if ((b >> i) & 1) ids->insert(static_cast<uint32_t>(byte * 8 + i));
    }
  }
  return absl::OkStatus();
}

ReadyRounds::ReadyRounds(int nodes, int self, int plans_node)
    : nodes_(nodes), self_(self), plans_node_(plans_node), known_(nodes) {
  current_.from.resize(nodes);
  next_.from.resize(nodes);
}

bool ReadyRounds::Takes(uint32_t id) const {
  return !off_ && id < kMaxDirectIds && !spilled_.contains(id);
}

void ReadyRounds::AddReady(uint32_t id) {
  if (!Takes(id) || !state_.insert(id).second) return;
  dirty_ = true;
}

void ReadyRounds::Spill(uint32_t id) {
  if (off_ || id >= kMaxDirectIds || spilled_.contains(id)) return;
  if (spill_out_.insert(id).second) dirty_ = true;
}

void ReadyRounds::Leave() {
  if (off_ || leave_out_) return;
  leave_out_ = true;
  dirty_ = true;
}

void ReadyRounds::PlansSeen(uint64_t plans) {
  if (off_ || self_ != plans_node_ || plans <= plans_seen_) return;
  plans_seen_ = plans;
  dirty_ = true;
}

absl::Status ReadyRounds::Receive(int from, const kolo::v1::ReadyRound& m) {
  if (from < 0 || from >= nodes_ || from == self_) {
    return absl::InvalidArgumentError(absl::StrCat("a round's message from node ", from));
  }
  if (off_) return absl::OkStatus();  // the rounds ended here; nothing is due
  if (m.round() < round_ || m.round() > round_ + 1) {
    if (m.nudge() && m.round() < round_) return absl::OkStatus();  // a round closed since
    return absl::InvalidArgumentError(absl::StrCat("node ", from, " sent its message of round ",
                                                   m.round(), " where round ", round_,
                                                   " or the next was due"));
  }
  Slot& slot = SlotOf(m.round());
  if (m.nudge()) {
    slot.nudged = true;
    return absl::OkStatus();
  }
  if (slot.from[from].has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node ", from, " sent round ", m.round(), " twice"));
  }
  Received r;
  if (absl::Status s = ParseIdBits(m.ready_bits(), &r.ready); !s.ok()) return s;
  if (absl::Status s = ParseIdBits(m.spill_bits(), &r.spill); !s.ok()) return s;
  r.off = m.off();
  r.plans = m.plans();
  if (from != plans_node_ && r.plans != 0) {
    return absl::InvalidArgumentError(absl::StrCat("node ", from, " counts ", r.plans,
                                                   " Plans, but only the coordinator's node does"));
  }
  if (from == plans_node_ && r.plans < released_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the coordinator's node counts ", r.plans, " Plans after ", released_));
  }
  slot.from[from] = std::move(r);
  return absl::OkStatus();
}

bool ReadyRounds::ReplyDue() const {
  bool any = current_.nudged;
  for (int j = 0; j < nodes_; ++j) {
    const std::optional<Received>& r = current_.from[j];
    if (!r.has_value()) continue;
    any = true;
    if (!r->spill.empty() || r->off) return true;
    if (j == plans_node_ && r->plans > released_at_start_) return true;
  }
  if (!any) return false;
  if (current_.nudged) return true;
  // Would this round's close run something? Every other node's state
  // holds at least its message of this round, or else what its last one
  // held that has not run.
  for (uint32_t id : state_) {
    bool everywhere = true;
    for (int j = 0; j < nodes_ && everywhere; ++j) {
      if (j == self_) continue;
      const std::optional<Received>& r = current_.from[j];
      everywhere = r.has_value() ? r->ready.contains(id) : known_[j].contains(id);
    }
    if (everywhere) return true;
  }
  return false;
}

void ReadyRounds::Send(Output* out) {
  kolo::v1::ReadyRound m;
  m.set_round(round_);
  m.set_ready_bits(IdBits(state_));
  m.set_spill_bits(IdBits(spill_out_));
  m.set_off(leave_out_);
  Received mine{state_, spill_out_, leave_out_, 0};
  if (self_ == plans_node_) {
    m.set_plans(plans_seen_);
    mine.plans = plans_seen_;
  }
  current_.from[self_] = std::move(mine);
  out->messages.push_back(std::move(m));
  spill_out_.clear();
  leave_out_ = false;
  sent_ = true;
  dirty_ = false;
}

bool ReadyRounds::Complete() const {
  return std::all_of(current_.from.begin(), current_.from.end(),
                     [](const std::optional<Received>& r) { return r.has_value(); });
}

void ReadyRounds::Close(Output* out) {
  // What every node's message holds runs; spills and a leave apply.
  IdSet run = current_.from[self_]->ready;
  IdSet spill;
  bool off = false;
  for (int j = 0; j < nodes_; ++j) {
    const Received& r = *current_.from[j];
    IdSet both;
    for (uint32_t id : run) {
      if (r.ready.contains(id)) both.insert(id);
    }
    run = std::move(both);
    spill.insert(r.spill.begin(), r.spill.end());
    off = off || r.off;
  }
  for (uint32_t id : spill) run.erase(id);
  if (!run.empty()) {
    Event e;
    e.kind = Event::Kind::kRun;
    e.ids.assign(run.begin(), run.end());
    out->events.push_back(std::move(e));
  }
  for (uint32_t id : run) state_.erase(id);
  spilled_.insert(spill.begin(), spill.end());
  Event moved;
  moved.kind = Event::Kind::kSpill;
  for (auto it = state_.begin(); it != state_.end();) {
    if (off || spill.contains(*it)) {
      moved.ids.push_back(*it);
      it = state_.erase(it);
    } else {
      ++it;
    }
  }
  if (!moved.ids.empty()) out->events.push_back(std::move(moved));
  for (int j = 0; j < nodes_; ++j) {
    known_[j].clear();
    if (off) continue;
    for (uint32_t id : current_.from[j]->ready) {
      if (!run.contains(id) && !spill.contains(id)) known_[j].insert(id);
    }
  }
  ++round_;
  current_ = std::move(next_);
  next_ = Slot();
  next_.from.resize(nodes_);
  sent_ = false;
  nudged_ = false;
  released_at_start_ = released_;
  if (off) {
    off_ = true;
    Event e;
    e.kind = Event::Kind::kOff;
    out->events.push_back(std::move(e));
  }
}

ReadyRounds::Output ReadyRounds::Pump() {
  Output out;
  while (!off_) {
    // The coordinator's Plans of this round run before its names.
    const std::optional<Received>& lead = current_.from[plans_node_];
    if (self_ != plans_node_ && lead.has_value() && lead->plans > released_) {
      Event e;
      e.kind = Event::Kind::kReleasePlans;
      e.plans = lead->plans;
      released_ = lead->plans;
      out.events.push_back(std::move(e));
    }
    if (!sent_) {
      if (!dirty_ && !ReplyDue()) break;
      Send(&out);
      if (self_ == plans_node_ && plans_seen_ > released_) {
        Event e;
        e.kind = Event::Kind::kReleasePlans;
        e.plans = plans_seen_;
        released_ = plans_seen_;
        out.events.push_back(std::move(e));
      }
    } else if (dirty_ && !nudged_) {
      kolo::v1::ReadyRound nudge;
      nudge.set_round(round_);
      nudge.set_nudge(true);
      out.messages.push_back(std::move(nudge));
      nudged_ = true;
    }
    if (!Complete()) break;
    Close(&out);
  }
  return out;
}

std::vector<int> ReadyRounds::NodesWithout(uint32_t id) const {
  std::vector<int> without;
  for (int j = 0; j < nodes_; ++j) {
    if (j == self_) continue;
    const std::optional<Received>& r = current_.from[j];
    if (!(r.has_value() ? r->ready.contains(id) : known_[j].contains(id))) without.push_back(j);
  }
  return without;
}

}  // namespace kolo::daemon
