// HandoffTable: what clients handed to kolod over the handoff socket (their
// kernel-vouched identity and, for a session, its segment), each under a
// one-time ticket that the Attach call redeems. Tickets expire, and how many
// may wait is bounded per uid and in total, so a client that hands off and
// never attaches cannot pin descriptors or memory.
//
// Thread-safety: thread-safe (one mutex).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/fd_passing.h"
#include "common/unique_fd.h"
#include "daemon/core/caller_memory.h"

namespace kolo::daemon {

struct Handoff {
  ProcessCredentials caller;
  UniqueFd segment;  // invalid for an identity-only ticket
  uint64_t segment_bytes = 0;
  // The caller's process, named by the kernel (null where it names none);
  // kolod reaches its memory only once the attach probe proved it may.
  std::shared_ptr<const CallerMemory> memory;
};

struct HandoffLimits {
  absl::Duration ttl = absl::Seconds(30);
  int max_waiting = 1024;
  int max_waiting_per_uid = 128;
};

class HandoffTable {
 public:
  explicit HandoffTable(HandoffLimits limits) : limits_(limits) {}

  // Stores `handoff`; RESOURCE_EXHAUSTED when too many wait.
  absl::StatusOr<std::string> Deposit(Handoff handoff, absl::Time now);
  // Takes the handoff out; PERMISSION_DENIED for an unknown, used or expired
  // ticket (the message says no more than that).
  absl::StatusOr<Handoff> Redeem(const std::string& ticket, absl::Time now);
  // Who handed off under `ticket`, leaving it in place (identity tickets
  // serve every call until they expire); PERMISSION_DENIED as Redeem.
  absl::StatusOr<ProcessCredentials> Identify(const std::string& ticket, absl::Time now);

  int waiting() const;

 private:
  struct Entry {
    Handoff handoff;
    absl::Time expires;
  };
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const HandoffLimits limits_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uid_t, int> per_uid_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kolo::daemon
