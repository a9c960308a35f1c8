// CheckPlannedEntry: a planned response from the coordinator, checked
// against this node's own requests before any memory is touched. The plan
// is untrusted input (the coordinator is another daemon): its row counts
// and alltoall splits size the reads from and writes into this node's
// tensors, so each must be what this node's ranks submitted, and every
// other rank's within bounds that cannot overflow. A failed check ends the
// job (the nodes would no longer move the same bytes).
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/request.h"
#include "daemon/wire/member_link.h"

namespace kolo::daemon {

// The most bytes one planned tensor (or one rank's part of it) may move.
inline constexpr uint64_t kMaxPlannedTensorBytes = uint64_t{1} << 40;

// `sets` are this node's parked sets of `entry`'s names, in entry order (all
// of them: the caller settled missing names first); `set_ranks` the global
// ranks of the entry's process set, ascending (null: every rank of a job of
// `job_size`); `nodes` how many nodes the job spans. Errors name the tensor,
// the rank and both values.
absl::Status CheckPlannedEntry(const PlannedEntry& entry, const std::vector<ReadySet>& sets,
                               int job_size, const std::vector<int>* set_ranks, int nodes);

// The coordinator's Welcome, before any UCX endpoint is made from it: every
// rank of a job of `job_size` on exactly one node, this node (at its index)
// with `local_ranks` (ascending) and its own worker address `own_address`,
// every other node with an address of sane length. (The addresses came in
// Hellos the coordinator accepted with the job token, over the
// authenticated Peer stream.)
absl::Status CheckWelcome(const kolo::v1::Welcome& welcome, int job_size,
                          const std::vector<int>& local_ranks, const std::string& own_address);

// A response this node takes part in without tensors (every rank here
// joined): its node indices and the members' metadata it is laid out from.
absl::Status CheckJoinedEntry(const PlannedEntry& entry, int nodes);

}  // namespace kolo::daemon
