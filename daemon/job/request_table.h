// RequestTable: the local readiness rule of one job.
//
// Requests are keyed by (process set, name). A name is ready when every
// required rank — the members of its process set that have not joined — has
// submitted it. Until then the table holds each rank's request; a rank that
// submits a name it already has in flight is refused with ALREADY_EXISTS
// (its first request stands). When a name becomes ready the table checks that
// the ranks agree (collective, dtype, shape, op, scale factors, root, group)
// and hands the set out.
//
// Thread-safety: not thread-safe; owned by its Job, which serialises access.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/request.h"

namespace kolo::daemon {

struct PendingView {
  std::string name;
  int process_set = 0;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  std::vector<int> submitted;
  std::vector<int> missing;
  absl::Time first_submitted;
};

class RequestTable {
 public:
  explicit RequestTable(int size) : size_(size) {}

  // Adds `request` (request.rank in [0, size)), moving from it on success.
  // Returns the ready set when every rank of `required` (sorted global
  // ranks) has now submitted, nullopt while some are missing, or
  // ALREADY_EXISTS for a duplicate in-flight name on one rank (then
  // `request` is left untouched).
  absl::StatusOr<std::optional<ReadySet>> Add(Request& request, const std::vector<int>& required);
  // The same with every rank of the job required.
  absl::StatusOr<std::optional<ReadySet>> Add(Request& request);

  // Takes out every name whose required ranks (`required_for(process_set)`)
  // have all submitted; used when the requirement shrinks (a rank joined).
  std::vector<ReadySet> TakeReady(
      const std::function<std::vector<int>(int process_set)>& required_for);

  // Removes and returns every pending request (to fail them).
  std::vector<Request> TakeAll();
  // The same for one process set.
  std::vector<Request> TakeProcessSet(int process_set);

  // `members_of(process_set)` lists who should submit; the rest are missing.
  std::vector<PendingView> Pending(
      const std::function<std::vector<int>(int process_set)>& members_of) const;
  std::vector<PendingView> Pending() const;
  size_t pending_names() const { return entries_.size(); }
  // Names `rank` has submitted that are still in the table.
  int pending_of(int rank) const;

 private:
  using Key = std::pair<int, std::string>;
  // Only the ranks that submitted take room: a name costs what was
  // submitted, never the job's size.
  struct Entry {
    absl::btree_map<int, Request> by_rank;
    absl::Time first_submitted;
  };
  static bool Complete(const Entry& e, const std::vector<int>& required);
  // Takes `e`'s requests off the per-rank counts.
  void Forget(const Entry& e);
  ReadySet Take(absl::flat_hash_map<Key, Entry>::iterator it, absl::Time now);

  int size_;
  absl::flat_hash_map<Key, Entry> entries_;
  absl::flat_hash_map<int, int> pending_by_rank_;
};

// The agreement check alone (the rule of daemon/plan/agreement.h, each rank
// against the first): OK, or FAILED_PRECONDITION naming the tensor, the
// ranks and their values, or the first rank that refused it (Request::refusal)
// and why. `requests` are in rank order.
absl::Status CheckAgreement(const std::vector<Request>& requests);

}  // namespace kolo::daemon
