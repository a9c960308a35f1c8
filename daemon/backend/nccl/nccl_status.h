// The one place where NCCL result codes become absl::Status.
//
// ncclInvalidArgument -> INVALID_ARGUMENT, ncclInvalidUsage ->
// FAILED_PRECONDITION, ncclSystemError and ncclRemoteError (a peer or the
// network failed) -> UNAVAILABLE, ncclUnhandledCudaError and
// ncclInternalError -> INTERNAL. ncclInProgress is not an error for a
// non-blocking communicator; callers poll it away (NcclCommunicator) and it
// maps to UNAVAILABLE only if it reaches here. The message names the
// operation, the result name, NCCL's description and, given a communicator,
// NCCL's last error text.
//
// Thread-safety: pure functions (ncclGetLastError reads NCCL's own state).
#pragma once

#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kolo::daemon::nccl {

absl::StatusCode NcclResultToStatusCode(ncclResult_t result);

// OK for ncclSuccess; otherwise an error naming `what`. `comm` (may be
// null) adds ncclGetLastError's text.
absl::Status NcclStatus(ncclResult_t result, absl::string_view what, ncclComm_t comm = nullptr);

}  // namespace kolo::daemon::nccl
