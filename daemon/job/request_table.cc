#include "daemon/job/request_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/plan/agreement.h"
#include "daemon/plan/tensor_desc.h"

namespace kolo::daemon {

absl::Status CheckAgreement(const std::vector<Request>& requests) {
  const Request& first = requests.front();
  const plan::TensorDesc reference = plan::DescOf(first);
  for (const Request& r : requests) {
    if (std::optional<plan::FieldDifference> d = plan::Difference(reference, plan::DescOf(r))) {
      return plan::Disagreement(first.kind, first.name, absl::StrCat("rank ", first.rank),
                                absl::StrCat("rank ", r.rank), *d);
    }
  }
  return absl::OkStatus();
}

bool RequestTable::Complete(const Entry& e, const std::vector<int>& required) {
  for (int r : required) {
    if (r < 0 || r >= static_cast<int>(e.by_rank.size()) || !e.by_rank[r].has_value()) {
      return false;
    }
  }
  return true;
}

ReadySet RequestTable::Take(absl::flat_hash_map<Key, Entry>::iterator it, absl::Time now) {
  Entry& e = it->second;
  ReadySet ready;
  ready.process_set = it->first.first;
  ready.name = it->first.second;
  ready.first_submitted = e.first_submitted;
  ready.ready_at = now;
  ready.requests.reserve(e.count);
  for (auto& r : e.by_rank) {
    if (r.has_value()) ready.requests.push_back(std::move(*r));
  }
  entries_.erase(it);
  ready.agreement = CheckAgreement(ready.requests);
  return ready;
}

absl::StatusOr<std::optional<ReadySet>> RequestTable::Add(Request& request) {
  std::vector<int> all(size_);
  for (int r = 0; r < size_; ++r) all[r] = r;
  return Add(request, all);
}

absl::StatusOr<std::optional<ReadySet>> RequestTable::Add(Request& request,
                                                          const std::vector<int>& required) {
  auto [it, inserted] = entries_.try_emplace(Key(request.process_set, request.name));
  Entry& e = it->second;
  if (inserted) {
    e.by_rank.resize(size_);
    e.first_submitted = request.submitted_at;
  }
  std::optional<Request>& slot = e.by_rank[request.rank];
  if (slot.has_value()) {
    return absl::AlreadyExistsError(
        absl::StrCat(CollectiveKindName(request.kind), " \"", request.name, "\": rank ",
                     request.rank, " submitted this name again while it is still in flight"));
  }
  absl::Time at = request.submitted_at;
  slot = std::move(request);
  ++e.count;
  if (!Complete(e, required)) return std::optional<ReadySet>();
  return std::optional<ReadySet>(Take(it, at));
}

std::vector<ReadySet> RequestTable::TakeReady(
    const std::function<std::vector<int>(int process_set)>& required_for) {
  std::vector<Key> ready_keys;
  for (const auto& [key, e] : entries_) {
    if (Complete(e, required_for(key.first))) ready_keys.push_back(key);
  }
  std::vector<ReadySet> out;
  absl::Time now = absl::Now();
  for (const Key& k : ready_keys) out.push_back(Take(entries_.find(k), now));
  return out;
}

std::vector<Request> RequestTable::TakeAll() {
  std::vector<Request> out;
  for (auto& [key, e] : entries_) {
    for (auto& r : e.by_rank) {
      if (r.has_value()) out.push_back(std::move(*r));
    }
  }
  entries_.clear();
  return out;
}

std::vector<Request> RequestTable::TakeProcessSet(int process_set) {
  std::vector<Request> out;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->first.first != process_set) {
      ++it;
      continue;
    }
    for (auto& r : it->second.by_rank) {
      if (r.has_value()) out.push_back(std::move(*r));
    }
    entries_.erase(it++);
  }
  return out;
}

std::vector<PendingView> RequestTable::Pending() const {
  return Pending([this](int) {
    std::vector<int> all(size_);
    for (int r = 0; r < size_; ++r) all[r] = r;
    return all;
  });
}

std::vector<PendingView> RequestTable::Pending(
    const std::function<std::vector<int>(int process_set)>& members_of) const {
  std::vector<PendingView> out;
  for (const auto& [key, e] : entries_) {
    PendingView v;
    v.process_set = key.first;
    v.name = key.second;
    v.first_submitted = e.first_submitted;
    for (int r : members_of(key.first)) {
      if (r >= 0 && r < size_ && e.by_rank[r].has_value()) {
        v.kind = e.by_rank[r]->kind;
        v.submitted.push_back(r);
      } else {
        v.missing.push_back(r);
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace kolo::daemon
