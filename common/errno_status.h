// The one place where errno values become absl::Status.
#pragma once

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace kolo {

// `what` names the failed operation and its object, e.g. "open /proc/7/fd/3".
absl::Status ErrnoToStatus(int err, absl::string_view what);

}  // namespace kolo
