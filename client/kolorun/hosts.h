// The host list of a job that spans machines (kolorun -H hostA:2,hostB:2):
// parsing it, deciding which entry is this machine, placing ranks on hosts in
// order, and the coordinator address every rank is given.
//
// Thread-safety: pure functions of their arguments; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kolo::kolorun {

inline constexpr int kDefaultPeerPort = 7371;

// One -H entry: a host (as ssh names it, so "user@host" and ssh config
// aliases are allowed) and how many ranks it takes.
struct HostSlots {
  std::string host;
  int slots = 1;

  bool operator==(const HostSlots&) const = default;
};

// Parses "HOST[:SLOTS],HOST[:SLOTS],...". SLOTS defaults to 1 and must be a
// positive integer. An IPv6 literal takes its slots in brackets
// ("[fe80::1]:2"); a bare one ("::1") has 1 slot. INVALID_ARGUMENT, naming
// the entry, for an empty list or entry, bad slots, a host that ssh would
// read as an option (leading '-') or that contains whitespace, and a host
// listed twice.
absl::StatusOr<std::vector<HostSlots>> ParseHostList(const std::string& spec);

// Parses one "HOST[:SLOTS]" entry, by the rules of ParseHostList (without the
// duplicate check, and also refusing ',' in a host). Errors start with
// `context` and the entry in quotes: `-H entry "a:x": slots "x" must be ...`.
absl::StatusOr<HostSlots> ParseHostEntry(absl::string_view entry, absl::string_view context);

// True when `host` names this machine: localhost, 127.0.0.1, ::1, or
// `this_host` (gethostname) or its first label, case-insensitively. A host
// with a user ("user@host") is never this machine: ssh is asked for.
bool IsThisMachine(const std::string& host, const std::string& this_host);

// Where one rank runs.
struct RankPlacement {
  std::string host;   // The -H entry; empty when the job has no host list.
  bool local = true;  // Started here rather than over ssh.
  int local_rank = 0;
  int local_size = 0;  // Ranks of the job on this rank's host.

  bool operator==(const RankPlacement&) const = default;
};

// Places `num_ranks` ranks: with no `hosts`, all on this machine; otherwise in
// order, filling each host's slots before the next (fewer ranks than slots
// leave the last hosts short or unused). INVALID_ARGUMENT when the ranks
// exceed the slots, or when two entries are this machine (their local ranks
// would collide on one kolod).
absl::StatusOr<std::vector<RankPlacement>> AssignRanks(const std::vector<HostSlots>& hosts,
                                                       int num_ranks, const std::string& this_host);

// The number of distinct hosts `placements` use.
int HostsUsed(const std::vector<RankPlacement>& placements);

// KOLO_COORDINATOR for a job whose rank 0 is placed as `rank0`:
// HOST:`peer_port` with HOST the host part of rank 0's entry (without
// "user@"; an IPv6 literal in brackets). When rank 0 is on this machine under
// a loopback name, which the other hosts cannot use, `this_host` stands in;
// FAILED_PRECONDITION if that is empty too.
absl::StatusOr<std::string> CoordinatorAddress(const RankPlacement& rank0,
                                               const std::string& this_host, int peer_port);

}  // namespace kolo::kolorun
