// FailureBudget: how many failed authentications a peer may cost this
// daemon. A peer (its certificate identity under TLS, else its address)
// whose Peer streams failed more than `max_failures` times within `window`
// (a wrong job token, a Hello for a job that never started, a missing,
// oversized or malformed first message) is refused at once, before its
// stream is read, for `backoff`; other peers are untouched. The table keeps
// at most `max_tracked` peers: idle entries expire after their window, and
// when it is full of live ones the peer that failed least recently and is
// not refused makes room (a peer refused now is never forgotten early).
//
// Time is passed in by the caller, so tests need no clock.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kolo::daemon {

struct FailureBudgetLimits {
  int max_failures = 32;
  absl::Duration window = absl::Minutes(1);
  absl::Duration backoff = absl::Minutes(1);
  size_t max_tracked = 4096;
};

class FailureBudget {
 public:
  explicit FailureBudget(FailureBudgetLimits limits) : limits_(limits) {}

  // OK, or RESOURCE_EXHAUSTED naming `peer` and how long it stays refused.
  absl::Status Check(const std::string& peer, absl::Time now) const;
  // Counts one failed stream of `peer`; returns whether it has used its
  // budget up now (it is refused from now on, for the backoff).
  bool RecordFailure(const std::string& peer, absl::Time now);
  // Peers in the table (for tests).
  size_t tracked() const;

 private:
  struct Entry {
    absl::Time window_start;
    int failures = 0;
    absl::Time refused_until = absl::InfinitePast();
    absl::Time last_failure;
  };
  // Whether `e` says nothing any more: its window and refusal are over.
  bool ExpiredLocked(const Entry& e, absl::Time now) const;
  // Makes room for one more entry; false when every entry is refused now.
  bool MakeRoomLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FailureBudgetLimits limits_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kolo::daemon
