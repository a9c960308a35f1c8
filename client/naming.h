// Naming: the names the client gives collectives on every rank alike, the
// checks on the names callers give, and the process sets this client knows.
// Barriers, joins, groups and process-set changes are named by per-purpose
// counters; ranks issue them in the same order, so the names agree.
//
// Thread-safety: thread-safe; mu_ guards the counters and the process sets
// and is taken with no other lock held, nor held while taking another.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kolo {

class Naming {
 public:
  // A name the caller gave must be 1 to kMaxNameBytes bytes.
  static absl::Status CheckName(std::string_view name);
  // Whether kolod takes `name` (1 to kMaxNameBytes bytes, no control
  // characters; see daemon/session/slot_validator.cc).
  static bool KolodTakes(std::string_view name);

  // The next barrier of `process_set`, join, process-set change.
  std::string NextBarrier(int process_set);
  std::string NextJoin();
  std::string NextProcessSetAdd();
  std::string NextProcessSetRemove();
  // The next group id of `process_set` (from 1).
  uint64_t NextGroup(int process_set);

  // Forgets every process set but the global one, of ranks [0, size).
  void ResetProcessSets(int size);
  void AddProcessSet(int id, std::vector<int> sorted_ranks);
  void RemoveProcessSet(int id);
  // `rank`'s position in `process_set`, and its number of ranks.
  absl::StatusOr<int> ProcessSetRank(int process_set, int rank) const;
  absl::StatusOr<int> ProcessSetSize(int process_set) const;

 private:
  uint64_t Next(const std::string& key);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, uint64_t> counters_ ABSL_GUARDED_BY(mu_);
  // Process sets this client knows, by id (0: every rank), ranks sorted.
  absl::flat_hash_map<int, std::vector<int>> process_sets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kolo
