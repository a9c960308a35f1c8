// The one rule for the ranks of a new process set, checked where the client
// is called (a clear error at the caller's line), by kolod for each rank's
// request, and by the coordinator for each node's report: at least one rank,
// distinct, ascending, each in [0, job size).
//
// Thread-safety: a pure function; safe from any thread.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace kolo {

// INVALID_ARGUMENT naming the first rank that breaks the rule.
absl::Status CheckProcessSetRanks(absl::Span<const int64_t> ranks, int64_t job_size);

}  // namespace kolo
