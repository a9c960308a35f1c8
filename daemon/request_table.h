// RequestTable: the local readiness rule of one job.
//
// A name is ready when every rank of the job has submitted it. Until then the
// table holds each rank's request; a rank that submits a name it already has
// in flight is refused with ALREADY_EXISTS (its first request stands). When a
// name becomes ready the table checks that the ranks agree (collective,
// dtype, shape, op, scale factors, root) and hands the whole set out.
//
// Thread-safety: not thread-safe; owned by its Job, which serialises access.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/request.h"

namespace kolo::daemon {

// All ranks' requests for one name, indexed by rank.
struct ReadySet {
  std::string name;
  std::vector<Request> requests;
  // OK, or the mismatch to deliver to every rank.
  absl::Status agreement;
  absl::Time first_submitted;  // when the first rank submitted it
  absl::Time ready_at;         // when the last one did
};

struct PendingView {
  std::string name;
  CollectiveKind kind;
  std::vector<int> submitted;
  std::vector<int> missing;
  absl::Time first_submitted;
};

class RequestTable {
 public:
  explicit RequestTable(int size) : size_(size) {}

  // Adds `request` (request.rank in [0, size)), moving from it on success.
  // Returns the ready set when this was the last rank missing, nullopt while
  // others are still missing, or ALREADY_EXISTS for a duplicate in-flight
  // name on one rank (then `request` is left untouched).
  absl::StatusOr<std::optional<ReadySet>> Add(Request& request);

  // Removes and returns every pending request (to fail them).
  std::vector<Request> TakeAll();

  std::vector<PendingView> Pending() const;
  size_t pending_names() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<std::optional<Request>> by_rank;
    int count = 0;
    absl::Time first_submitted;
  };

  int size_;
  absl::flat_hash_map<std::string, Entry> entries_;
};

// The agreement check alone: OK, or FAILED_PRECONDITION naming the tensor,
// the ranks and their values. `requests` are indexed by rank.
absl::Status CheckAgreement(const std::vector<Request>& requests);

}  // namespace kolo::daemon
