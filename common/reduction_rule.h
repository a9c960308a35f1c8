// The one rule for a reduction's arguments (allreduce, reducescatter),
// checked where the client is called (a clear error at the caller's line)
// and by kolod for every rank's request: the dtype takes the op (bool has no
// average, adasum takes floating point only), bool takes no scale factor,
// reducescatter sums or averages, and adasum runs on host tensors without
// compression.
//
// Thread-safety: a pure function; safe from any thread.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/kolo/abi/types.h"

namespace kolo {

// INVALID_ARGUMENT, "<kind> \"<name>\": why", for arguments the rule refuses.
absl::Status CheckReductionArgs(CollectiveKind kind, absl::string_view name, DType dtype,
                                ReduceOp op, double prescale, double postscale,
                                Compression compression, bool device);

}  // namespace kolo
