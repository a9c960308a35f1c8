// Shares: how much of one resource (connections, calls) each identity holds,
// bounded per identity first and in total second, so that no identity can
// take what the others need. An identity is a short string the caller
// chooses ("uid 1000", "ipv4:127.0.0.1", "the admin token").
//
// Thread-safety: thread-safe (one mutex); a Lease is a move-only value owned
// by one thread at a time, and the Shares must outlive its leases.
#pragma once

#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kolo::daemon {

struct ShareLimits {
  int per_identity = 16;
  int total = 128;
};

class Shares {
 public:
  // One unit held by one identity, given back when the lease is destroyed.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept
        : shares_(std::exchange(o.shares_, nullptr)), identity_(std::move(o.identity_)) {}
    Lease& operator=(Lease&& o) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { Reset(); }

    bool held() const { return shares_ != nullptr; }
    void Reset();

   private:
    friend class Shares;
    Lease(Shares* shares, std::string identity) : shares_(shares), identity_(std::move(identity)) {}
    Shares* shares_ = nullptr;
    std::string identity_;
  };

  // `what` names the resource in errors ("calls without credentials on the
  // Unix socket"), `knob` what sets the share ("--max_anonymous_calls").
  Shares(std::string what, std::string knob, ShareLimits limits)
      : what_(std::move(what)), knob_(std::move(knob)), limits_(limits) {}
  Shares(const Shares&) = delete;
  Shares& operator=(const Shares&) = delete;

  // One more unit for `identity`; RESOURCE_EXHAUSTED, naming the share that
  // is full, when the identity holds its share or all identities together
  // hold the total.
  absl::StatusOr<Lease> Take(absl::string_view identity);

  int held(absl::string_view identity) const;
  int total_held() const;
  const ShareLimits& limits() const { return limits_; }

 private:
  void Give(const std::string& identity);

  const std::string what_;
  const std::string knob_;
  const ShareLimits limits_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> held_ ABSL_GUARDED_BY(mu_);
  int total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kolo::daemon
