// Whether a collective whose ranks agreed may run now: the rules that depend
// on the job's state (ranks that joined, the broadcast root's place), each
// written once and called by the one-node path (Job) and the coordinator
// alike, so a name refused on one node is refused across nodes, with the
// same code and message.
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
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
// joined (only the kinds with runs_with_joined can).
absl::Status CheckRunsWithJoined(CollectiveKind kind, absl::string_view name,
                                 const JoinedRanks& joined);

// FAILED_PRECONDITION if a broadcast's root rank has joined: it has nothing
// to send.
absl::Status CheckRootNotJoined(absl::string_view name, int root_rank, bool root_joined);

// FAILED_PRECONDITION if a broadcast's root is not a member of its set
// (`members` ascending).
absl::Status CheckRootInSet(absl::string_view name, int root_rank, int process_set,
                            const std::vector<int>& members);

// INVALID_ARGUMENT if a control collective (join, process-set changes),
// which involves every rank of the job, names a process set.
absl::Status CheckWholeJob(CollectiveKind kind, absl::string_view name, int process_set);

}  // namespace kolo::daemon::plan
