#include "client/kolorun/elastic_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace kolo::kolorun {
namespace {

absl::StatusOr<absl::Duration> PositiveSeconds(const char* flag, double s) {
  if (!std::isfinite(s) || s <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be a positive number of seconds, got ", s));
  }
  return absl::Seconds(s);
}

}  // namespace

absl::StatusOr<ElasticOptions> ElasticOptionsFromFlags(int num_ranks, const ElasticFlags& flags) {
  ElasticOptions out;
  out.enabled =
      flags.min_np.has_value() || flags.max_np.has_value() || !flags.host_discovery_script.empty();
  if (!out.enabled) return out;
  if (flags.max_np.has_value() && *flags.max_np < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-np must be at least 1, got ", *flags.max_np,
                     " (leave it out for no bound, which needs --host-discovery-script)"));
  }
  out.min_ranks = flags.min_np.value_or(num_ranks);
  out.max_ranks = flags.max_np.value_or(flags.host_discovery_script.empty() ? num_ranks : 0);
  out.discovery_script = flags.host_discovery_script;
  out.max_failures_per_host = flags.max_failures_per_host;
  absl::StatusOr<absl::Duration> interval =
      PositiveSeconds("discovery-interval-s", flags.discovery_interval_s);
  if (!interval.ok()) return interval.status();
  out.discovery_interval = *interval;
  absl::StatusOr<absl::Duration> timeout =
      PositiveSeconds("elastic-timeout-s", flags.elastic_timeout_s);
  if (!timeout.ok()) return timeout.status();
  out.elastic_timeout = *timeout;
  return out;
}

absl::Status ValidateElasticOptions(int num_ranks, const ElasticOptions& options) {
  if (!options.enabled) return absl::OkStatus();
  if (options.min_ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min-np must be at least 1, got ", options.min_ranks));
  }
  if (options.min_ranks > num_ranks) {
    return absl::InvalidArgumentError(absl::StrCat("--min-np ", options.min_ranks,
                                                   " is more than -np ", num_ranks,
                                                   " (want 1 <= min-np <= np <= max-np)"));
  }
  if (options.max_ranks < 0 || (options.max_ranks > 0 && options.max_ranks < num_ranks)) {
    return absl::InvalidArgumentError(absl::StrCat("--max-np ", options.max_ranks,
                                                   " is less than -np ", num_ranks,
                                                   " (want 1 <= min-np <= np <= max-np)"));
  }
  if (options.max_failures_per_host < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-failures-per-host must be at least 1, got ", options.max_failures_per_host));
  }
  if (options.discovery_interval <= absl::ZeroDuration() ||
      options.discovery_timeout <= absl::ZeroDuration() ||
      options.elastic_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "the discovery interval and timeout and the elastic timeout must be positive");
  }
  if (options.restart_backoff < absl::ZeroDuration() ||
      options.max_restart_backoff < options.restart_backoff) {
    return absl::InvalidArgumentError(
        absl::StrCat("the restart back-off must be non-negative and at most its cap, got ",
                     absl::FormatDuration(options.restart_backoff), " and ",
                     absl::FormatDuration(options.max_restart_backoff)));
  }
  return absl::OkStatus();
}

}  // namespace kolo::kolorun
