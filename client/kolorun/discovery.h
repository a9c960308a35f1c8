// Host discovery for elastic jobs (kolorun --host-discovery-script): running
// the script, bounded in time, without blocking kolorun's poll loop, and
// parsing what it prints.
//
// The script prints the hosts the job may use now, one a line:
//
//   hostA:4        a host and its slots (how many ranks it takes)
//   hostB          a host with 1 slot
//   # a comment    ignored, as are blank lines and text after '#'
//
// Hosts are named as for -H (hosts.h). A host listed twice, two names for
// this machine, or any other line is an error naming the line. Output that
// names no host is valid: no host is usable now.
//
// Thread-safety: ParseDiscoveryOutput is pure; a HostDiscovery is owned by
// one thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/kolorun/clock.h"
#include "client/kolorun/hosts.h"
#include "client/kolorun/subprocess.h"

namespace kolo::kolorun {

// The hosts `text` lists, in order. `this_host` is this machine's hostname
// (see IsThisMachine).
absl::StatusOr<std::vector<HostSlots>> ParseDiscoveryOutput(absl::string_view text,
                                                            const std::string& this_host);

// Runs the discovery script, one run at a time. The owner starts a run, polls
// PollFds() alongside its other descriptors, and calls Service until it
// returns the run's outcome.
class HostDiscovery {
 public:
  using Clock = kolorun::Clock;

  // The most a run may print; more fails the run.
  static constexpr size_t kMaxOutputBytes = size_t{1} << 20;

  // `script` is run with no arguments (looked up in PATH when it has no '/')
  // in the environment `env`; a run taking longer than `timeout` is killed.
  HostDiscovery(std::string script, std::vector<std::string> env, std::string this_host,
                absl::Duration timeout);
  HostDiscovery(const HostDiscovery&) = delete;
  HostDiscovery& operator=(const HostDiscovery&) = delete;
  ~HostDiscovery();

  // Starts a run (at most one runs at a time: FAILED_PRECONDITION while one
  // does). Returns the read end of the script's stderr, for the owner to
  // forward; an error when the script cannot be executed.
  absl::StatusOr<UniqueFd> Start(Clock::time_point now);

  bool running() const { return child_ != nullptr; }

  // Descriptors that poll readable when Service has something to do; empty
  // when no run is in progress.
  std::vector<int> PollFds() const;

  // Reads what the running script printed. Once it has exited, or has run
  // past its time (it is then killed), returns the run's outcome: the hosts,
  // or an error naming the script and what went wrong. nullopt while the run
  // goes on or when none runs.
  std::optional<absl::StatusOr<std::vector<HostSlots>>> Service(Clock::time_point now);

 private:
  // Reads the script's stdout until it would block, is closed, or the output
  // is over kMaxOutputBytes.
  void ReadStdout();
  absl::StatusOr<std::vector<HostSlots>> Finish(const ExitStatus& status);

  const std::string script_;
  const std::vector<std::string> env_;
  const std::string this_host_;
  const absl::Duration timeout_;

  // The run in progress.
  std::unique_ptr<Subprocess> child_;
  UniqueFd stdout_;
  Clock::time_point deadline_;
  std::string output_;
  bool overflow_ = false;
};

}  // namespace kolo::kolorun
