#include "daemon/negotiation/plan_order.h"

#include <utility>

namespace kolo::daemon {

uint64_t PlanOrder::AddPlan(std::vector<PlannedEntry> plan) {
  arrived_.emplace(plans_in_++, std::move(plan));
  return plans_in_;
}

void PlanOrder::Add(RoundStep step) { order_.push_back(std::move(step)); }

bool PlanOrder::TakeNextPlan(std::deque<PlannedEntry>* out) {
  auto it = arrived_.find(next_plan_);
  if (it == arrived_.end()) return false;
  for (PlannedEntry& e : it->second) out->push_back(std::move(e));
  arrived_.erase(it);
  ++next_plan_;
  return true;
}

void PlanOrder::Drain(std::deque<PlannedEntry>* out) {
  while (!order_.empty()) {
    RoundStep& head = order_.front();
    if (auto* release = std::get_if<PlanRelease>(&head)) {
      while (next_plan_ < release->plans_before) {
        if (!TakeNextPlan(out)) return;  // still on its way here
      }
    } else {
      for (PlannedEntry& e : std::get<std::vector<PlannedEntry>>(head)) {
        out->push_back(std::move(e));
      }
    }
    order_.pop_front();
  }
  if (gated_) return;
  while (TakeNextPlan(out)) {
  }
}

}  // namespace kolo::daemon
