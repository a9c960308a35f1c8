// ProcessSetRegistry: a job's process sets by id, as the job on each node and
// the coordinator both keep them. Set 0, every rank of the job, always
// exists; the others are added and removed in plan order, so every node's
// registry holds the same sets. A set being removed (agreed here, not yet
// planned) takes no new names.
//
// Thread-safety: not thread-safe; its owner's lock guards it.
#pragma once

#include <map>
#include <set>
#include <vector>

#include "absl/status/statusor.h"

namespace kolo::daemon::plan {

class ProcessSetRegistry {
 public:
  explicit ProcessSetRegistry(int job_size);

  bool Contains(int id) const { return sets_.contains(id); }
  // The ranks of set `id`, ascending; null if there is no such set.
  const std::vector<int>* Members(int id) const;
  // The ranks of set `id`, or every rank of the job for an unknown id.
  const std::vector<int>& MembersOrAll(int id) const;
  // Sets besides set 0.
  int added() const { return static_cast<int>(sets_.size()) - 1; }

  // Adds the set `ranks` (checked by CheckProcessSetRanks) under the next
  // id, the coordinator's way of numbering; returns the id.
  absl::StatusOr<int> Add(const std::vector<int64_t>& ranks);
  // Adds the set `ranks` under `id`, as a plan from the coordinator says.
  void AddAs(int id, std::vector<int> ranks);
  // FAILED_PRECONDITION unless set `id` may be removed: it exists, is not
  // set 0 and is not being removed already. The message names the set.
  absl::Status CheckRemovable(int id) const;
  // Removes set `id` (CheckRemovable's verdict but for a removal in
  // progress, which this ends).
  absl::Status Remove(int id);

  // A removal agreed by this node's ranks and not yet planned.
  void BeginRemoval(int id) { removing_.insert(id); }
  void CancelRemoval(int id) { removing_.erase(id); }
  bool Removing(int id) const { return removing_.contains(id); }

 private:
  std::map<int, std::vector<int>> sets_;
  std::set<int> removing_;
  int next_id_ = 1;
};

}  // namespace kolo::daemon::plan
