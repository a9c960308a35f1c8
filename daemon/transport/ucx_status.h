// The one place where UCX's ucs_status_t becomes absl::Status.
//
// Thread-safety: pure functions.
#pragma once

#include <ucs/type/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kolo::daemon {

// OK for UCS_OK (and UCS_INPROGRESS, which is not a failure); otherwise a
// status whose message is "`what`: <UCX's text> (<UCX code>)". `what` names
// the operation and its object, e.g. "node 1: send to node 2".
absl::Status UcsToStatus(ucs_status_t status, absl::string_view what);

}  // namespace kolo::daemon
