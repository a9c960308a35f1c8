#include "daemon/job/request_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/plan/agreement.h"
#include "daemon/plan/tensor_desc.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon {

absl::Status CheckAgreement(const std::vector<Request>& requests) {
  const Request& first = requests.front();
  for (const Request& r : requests) {
    if (r.refusal.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(CollectiveKindName(r.kind), " \"", r.name,
                                                        "\": rank ", r.rank,
                                                        " refused it: ", *r.refusal));
    }
  }
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
  if (e.by_rank.size() < required.size()) return false;
  for (int r : required) {
    if (!e.by_rank.contains(r)) return false;
  }
  return true;
}

void RequestTable::Forget(const Entry& e) {
  for (const auto& [rank, request] : e.by_rank) {
    auto it = pending_by_rank_.find(rank);
    if (--it->second == 0) pending_by_rank_.erase(it);
  }
}

int RequestTable::pending_of(int rank) const {
  auto it = pending_by_rank_.find(rank);
  return it == pending_by_rank_.end() ? 0 : it->second;
}

ReadySet RequestTable::Take(absl::flat_hash_map<Key, Entry>::iterator it, absl::Time now) {
  Entry& e = it->second;
  ReadySet ready;
  ready.process_set = it->first.first;
  ready.name = it->first.second;
  ready.first_submitted = e.first_submitted;
  ready.ready_at = now;
  ready.requests.reserve(e.by_rank.size());
  Forget(e);
  for (auto& [rank, r] : e.by_rank) ready.requests.push_back(std::move(r));
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
  if (inserted) e.first_submitted = request.submitted_at;
  if (e.by_rank.contains(request.rank)) {
    return absl::AlreadyExistsError(
        absl::StrCat(CollectiveKindName(request.kind), " \"", request.name, "\": rank ",
                     request.rank, " submitted this name again while it is still in flight"));
  }
  const absl::Time at = request.submitted_at;
  const int rank = request.rank;
  ++pending_by_rank_[rank];
  e.by_rank.emplace(rank, std::move(request));
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
    for (auto& [rank, r] : e.by_rank) out.push_back(std::move(r));
  }
  entries_.clear();
  pending_by_rank_.clear();
  return out;
}

std::vector<Request> RequestTable::TakeProcessSet(int process_set) {
  std::vector<Request> out;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->first.first != process_set) {
      ++it;
      continue;
    }
    Forget(it->second);
    for (auto& [rank, r] : it->second.by_rank) out.push_back(std::move(r));
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
      if (auto got = e.by_rank.find(r); got != e.by_rank.end()) {
        v.kind = got->second.kind;
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
