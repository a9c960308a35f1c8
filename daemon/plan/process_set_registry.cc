#include "daemon/plan/process_set_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/process_set_rule.h"

namespace kolo::daemon::plan {

ProcessSetRegistry::ProcessSetRegistry(int job_size) {
  std::vector<int> all(job_size);
  for (int r = 0; r < job_size; ++r) all[r] = r;
  sets_[0] = std::move(all);
}

const std::vector<int>* ProcessSetRegistry::Members(int id) const {
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : &it->second;
}

const std::vector<int>& ProcessSetRegistry::MembersOrAll(int id) const {
  const std::vector<int>* members = Members(id);
  return members != nullptr ? *members : sets_.at(0);
}

absl::StatusOr<int> ProcessSetRegistry::Add(const std::vector<int64_t>& ranks) {
  absl::Status valid =
      CheckProcessSetRanks(ranks, static_cast<int64_t>(sets_.at(0).size()));
  if (!valid.ok()) return valid;
  const int id = next_id_++;
  sets_[id] = std::vector<int>(ranks.begin(), ranks.end());
  return id;
}

void ProcessSetRegistry::AddAs(int id, std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  sets_[id] = std::move(ranks);
  next_id_ = std::max(next_id_, id + 1);
}

absl::Status ProcessSetRegistry::CheckRemovable(int id) const {
  if (id <= 0 || !sets_.contains(id)) {
    return absl::FailedPreconditionError(absl::StrCat("process set ", id, " does not exist"));
  }
  if (removing_.contains(id)) {
    return absl::FailedPreconditionError(absl::StrCat("process set ", id, " is being removed"));
  }
  return absl::OkStatus();
}

absl::Status ProcessSetRegistry::Remove(int id) {
  removing_.erase(id);
  absl::Status removable = CheckRemovable(id);
  if (!removable.ok()) return removable;
  sets_.erase(id);
  return absl::OkStatus();
}

}  // namespace kolo::daemon::plan
