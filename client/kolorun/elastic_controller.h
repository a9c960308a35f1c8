// ElasticController: the decisions of an elastic job (elastic_options.h).
// Which hosts the job may use, whether and when a failed rank is restarted,
// when a host is blocklisted, where new ranks join, and when the job has
// too few ranks to go on. It starts and signals nothing itself: the job
// runner tells it which processes started and exited and what discovery
// found, and carries out what it answers.
//
// Processes are named by their launcher serial (the N of their "[N] " output
// prefix) and hosts as -H or discovery names them; "" is this machine in a
// job without a host list.
//
// The rules:
//   1. A process that exits 0 makes the job finishing: no restarts or new
//      ranks from then on; the others are waited for.
//   2. A process that fails while the job is growing (not finishing, not
//      stopped) counts a failure against its host. Below
//      max_failures_per_host failures it is restarted there, as a joiner,
//      after restart_backoff * 2^(failures - 1), capped at
//      max_restart_backoff; at the limit the host is blocklisted for the
//      rest of the job (its running ranks go on; nothing new starts there).
//   3. The job keeps min(max_ranks, usable slots) ranks: running ones plus
//      pending restarts. Free slots of usable hosts (listed and not
//      blocklisted) get joiners, in host-list order. A host whose slots
//      shrink keeps its extra ranks.
//   4. A host that leaves the list has its processes stopped by the caller;
//      they are not restarted and their exits are not failures.
//   5. Running ranks plus pending restarts below min_ranks end the job: at
//      once without a discovery script (nothing can bring more), else once
//      that has lasted elastic_timeout.
//
// Thread-safety: not thread-safe; owned by the supervising thread.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "client/kolorun/clock.h"
#include "client/kolorun/elastic_options.h"
#include "client/kolorun/hosts.h"
#include "client/kolorun/subprocess.h"

namespace kolo::kolorun {

class ElasticController {
 public:
  using Clock = kolorun::Clock;

  // `hosts`: the hosts at the start (-H, the first discovery, or {"", -np}).
  ElasticController(const ElasticOptions& options, std::vector<HostSlots> hosts);

  // Replaces the host list with a newer one. Returns the serials of running
  // processes whose host has left it (rule 4), which the caller stops.
  std::vector<int> SetHosts(std::vector<HostSlots> hosts);
  const std::vector<HostSlots>& hosts() const { return hosts_; }

  // A process started on `host`; `joiner`: started after the job began.
  void OnStarted(int serial, const std::string& host, bool joiner = false);

  struct Verdict {
    enum class Kind {
      kStopped,       // Stopped by kolorun because its host left (rule 4).
      kSucceeded,     // Exited 0; the job is finishing (rule 1).
      kRestart,       // Failed; restarted at `restart_at` (rule 2).
      kBlocklisted,   // Failed; its host has just been blocklisted (rule 2).
      kNotRestarted,  // Failed while growing, on a host blocklisted or gone.
      kEnding,        // Failed while finishing or stopped: a job failure.
      kLateJoiner,    // A joiner failed while the job was finishing: it had
                      // no job left to join; not a job failure.
    };
    Kind kind = Kind::kEnding;
    std::string host;
    int host_failures = 0;  // Failures of `host` so far, this one included.
    Clock::time_point restart_at;
    bool first_success = false;  // kSucceeded: the job has just begun finishing.
  };
  // Process `serial` exited with `status`.
  Verdict OnExited(int serial, const ExitStatus& status, Clock::time_point now);
  // A joiner could not be started on `host`: a failure of that host.
  Verdict OnStartFailed(const std::string& host, Clock::time_point now);

  // The hosts to start joiners on now, one entry per joiner: restarts whose
  // back-off has passed, then free slots (rule 3). The caller reports each
  // with OnStarted or OnStartFailed.
  std::vector<std::string> TakeDueStarts(Clock::time_point now);

  // Rule 5: the number of ranks left (running and pending restarts) when the
  // job must end for having fewer than min_ranks, else nullopt. Call it after
  // TakeDueStarts.
  std::optional<int> CheckMinimum(Clock::time_point now);

  // No more restarts or joiners (the job is being shut down).
  void Stop();
  // True until the job is finishing or stopped.
  bool growing() const { return !finishing_ && !stopped_; }
  bool blocklisted(const std::string& host) const;

 private:
  struct HostRecord {
    int failures = 0;
    bool blocklisted = false;
  };
  struct PendingRestart {
    std::string host;
    Clock::time_point due;
  };

  bool Listed(const std::string& host) const;
  bool Usable(const std::string& host) const { return Listed(host) && !blocklisted(host); }
  Verdict RecordFailure(const std::string& host, Clock::time_point now);
  Clock::duration Backoff(int failures) const;
  int Committed() const { return static_cast<int>(live_.size() + pending_.size()); }

  const ElasticOptions options_;
  std::vector<HostSlots> hosts_;
  std::map<std::string, HostRecord> records_;  // Kept when a host leaves.
  std::map<int, std::string> live_;            // Serial -> host.
  std::set<int> stopping_;                     // Serials stopped for rule 4.
  std::vector<PendingRestart> pending_;
  std::set<int> joiners_;  // serials of the processes started as joiners
  bool finishing_ = false;
  bool stopped_ = false;
  std::optional<Clock::time_point> below_minimum_since_;
};

}  // namespace kolo::kolorun
