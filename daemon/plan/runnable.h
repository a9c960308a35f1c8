// Whether a collective whose ranks agreed may run now: the rules that depend
// on the job's state (ranks that joined, the broadcast root's place, an
// alltoall's splits against its set, the process sets a change names), each
// written once and called by the one-node path (Job) and the coordinator
// alike, so a name refused on one node is refused across nodes, with the
// same code and message.
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/plan/process_set_registry.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon::plan {

// Who of a collective's set has joined, as far as the caller knows: a count,
// and the ranks themselves where known (a node knows its own; the
// coordinator knows counts and which nodes joined whole).
struct JoinedRanks {
  int count = 0;
  std::vector<int> ranks;  // ascending; empty where only the count is known
};

// FAILED_PRECONDITION if `kind` cannot run while ranks of its set have
// joined (only the kinds with runs_with_joined can: allreduce and barrier;
// a broadcast fails on the ranks that did not join, as in Horovod, whether
// or not its root joined).
absl::Status CheckRunsWithJoined(CollectiveKind kind, absl::string_view name,
                                 const JoinedRanks& joined);

// FAILED_PRECONDITION if a broadcast's root is not a member of its set
// (`members` ascending).
absl::Status CheckRootInSet(absl::string_view name, int root_rank, int process_set,
                            const std::vector<int>& members);

// INVALID_ARGUMENT if a control collective (join, process-set changes),
// which involves every rank of the job, names a process set.
absl::Status CheckWholeJob(CollectiveKind kind, absl::string_view name, int process_set);

// FAILED_PRECONDITION unless rank `rank`'s alltoall splits (`splits`, one
// per rank of its set of `ranks`; empty: even) are non-negative and sum to
// its first dimension `rows` (or, without splits, `rows` divides evenly).
absl::Status CheckAlltoallSplits(absl::string_view name, int rank, int64_t rows,
                                 const std::vector<int64_t>& splits, int64_t ranks);

// The set a remove_process_set names (its one aux value); 0, which is never
// removable, when it names none or one out of range.
int RemovedSetId(const std::vector<int64_t>& aux);

// A process-set change that cannot be applied, as every node and the
// coordinator say it: `<kind> "<name>": <why>`, with why's code.
absl::Status SetChangeError(CollectiveKind kind, absl::string_view name, const absl::Status& why);

// Why the set change `kind` (add: the ranks `aux`; remove: the set `aux`
// names) cannot be applied to `sets` now, or OK.
absl::Status CheckSetChange(CollectiveKind kind, absl::string_view name,
                            const std::vector<int64_t>& aux, const ProcessSetRegistry& sets);

}  // namespace kolo::daemon::plan
