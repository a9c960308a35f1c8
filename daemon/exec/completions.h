// Delivering completions: grouped per origin (session), so each session's clients get
// one doorbell for everything that finished together.
//
// Thread-safety: stateless; call from any thread without the job's lock.
#pragma once

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/request.h"

namespace kolo::daemon {

using Outbox = std::vector<std::pair<RequestOrigin*, Completion>>;

// Writes every completion of `items` to its session and clears `items`.
void Deliver(Outbox& items);
// Completes every request of `sets` with `status`.
void CompleteAll(const std::vector<ReadySet>& sets, const absl::Status& status);

}  // namespace kolo::daemon
