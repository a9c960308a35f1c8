// The settings of an elastic job (kolorun --min-np, --max-np,
// --host-discovery-script and the flags that tune them), how the flags
// become those settings, and their validation.
//
// In an elastic job kolorun keeps the job going through rank failures and
// host changes: a failed rank is restarted (as a joiner) on its host after a
// back-off, a host that fails too often is blocklisted, new slots that host
// discovery reports get joiners, and the job ends when a rank succeeds or
// when fewer than the minimum can be kept running. See elastic_controller.h.
//
// Thread-safety: plain values and pure functions; safe from any thread.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kolo::kolorun {

struct ElasticOptions {
  bool enabled = false;
  int min_ranks = 0;  // --min-np.
  int max_ranks = 0;  // --max-np; 0: no bound.
  // Prints the usable hosts, one HOST[:SLOTS] a line (discovery.h). Empty:
  // the hosts are fixed (-H, or this machine with -np slots).
  std::string discovery_script;
  // Time between the end of one discovery run and the start of the next.
  absl::Duration discovery_interval = absl::Seconds(1);
  // A run taking longer is killed and counts as failed.
  absl::Duration discovery_timeout = absl::Seconds(10);
  // A host whose ranks failed this many times is blocklisted.
  int max_failures_per_host = 3;
  // A failed rank is restarted after `restart_backoff`, doubled for each
  // earlier failure on its host, at most `max_restart_backoff`.
  absl::Duration restart_backoff = absl::Seconds(1);
  absl::Duration max_restart_backoff = absl::Seconds(30);
  // How long the job waits, with fewer than min_ranks ranks, for discovery
  // to bring hosts (at the start, and after losing ranks).
  absl::Duration elastic_timeout = absl::Seconds(600);
};

// The elastic flags of kolorun's command line, as given.
struct ElasticFlags {
  std::optional<int> min_np;
  std::optional<int> max_np;
  std::string host_discovery_script;
  double discovery_interval_s = 1;
  int max_failures_per_host = 3;
  double elastic_timeout_s = 600;
};

// Elastic mode is on when --min-np, --max-np or --host-discovery-script is
// given. --min-np defaults to `num_ranks` (-np); --max-np to `num_ranks`
// without a discovery script, else to no bound. INVALID_ARGUMENT for a
// --max-np below 1 (no bound is asked for by leaving it out) and for a
// duration that is not a positive number. Range checks against -np are
// ValidateElasticOptions's.
absl::StatusOr<ElasticOptions> ElasticOptionsFromFlags(int num_ranks, const ElasticFlags& flags);

// OK when `options` is off, or 1 <= min_ranks <= num_ranks <= max_ranks
// (max_ranks 0: no bound) and the counts and durations are sensible;
// otherwise INVALID_ARGUMENT naming the flag and the values.
absl::Status ValidateElasticOptions(int num_ranks, const ElasticOptions& options);

}  // namespace kolo::kolorun
