// JobRunner: drives one kolorun job through steps 1-5 of launcher.h and, in
// an elastic job, carries out what its ElasticController decides: restarts,
// joiners, stopping the ranks of hosts that left, ending a job with too few
// ranks; it also runs host discovery.
//
// Thread-safety: used by one thread, the one that called RunJob.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/kolorun/clock.h"
#include "client/kolorun/discovery.h"
#include "client/kolorun/elastic_controller.h"
#include "client/kolorun/hosts.h"
#include "client/kolorun/launcher.h"
#include "client/kolorun/output_pump.h"
#include "client/kolorun/signal_catcher.h"
#include "client/kolorun/subprocess.h"

namespace kolo::kolorun {

class TempDir;

class JobRunner {
 public:
  // `options` must be valid (ValidateOptions) and outlive the runner.
  explicit JobRunner(const LaunchOptions& options);
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;
  ~JobRunner();

  // See RunJob.
  absl::StatusOr<int> Run();

 private:
  using Clock = kolorun::Clock;

  // One process started for a rank. Its launcher serial is its index in
  // ranks_, and the N of its "[N] " output prefix.
  struct RankProcess {
    std::unique_ptr<Subprocess> child;
    RankPlacement place;
    int rank = 0;  // The KOLO_RANK it was given.
    // Its host left the host list: it was sent SIGTERM, and gets SIGKILL at
    // kill_at if still running.
    bool leaving = false;
    std::optional<Clock::time_point> kill_at;
  };

  // Where a joiner goes and the KOLO_* hints it gets.
  struct JoinerSlot {
    RankPlacement place;
    int rank = 0;
    int size = 0;
  };

  void Message(absl::string_view text);
  void PollOnce(Clock::duration max_wait);
  std::vector<int> TakeSignals();
  // CANCELLED (and a message naming the signal and `while_doing`) when a
  // forwarded signal arrived before the job's ranks started.
  absl::Status TakeInterrupt(absl::string_view while_doing);
  // Waits, handling output, until `t`; CANCELLED if a signal arrives first.
  absl::Status WaitUntil(Clock::time_point t);
  std::string Label(size_t serial, const RankPlacement& place) const;
  std::string Label(size_t serial) const { return Label(serial, ranks_[serial].place); }
  // "rank 2 exited with status 3", with a hint when it may be ssh's failure.
  std::string ExitText(size_t serial, const ExitStatus& status) const;
  size_t Running() const;

  // Step 1.
  absl::StatusOr<std::string> EnsureDaemon(const std::vector<RankPlacement>& placements);
  // Step 2.
  absl::Status SpawnRank(const RankPlacement& place, int rank, int size, bool joiner);
  absl::Status StartInitialRanks(const std::vector<RankPlacement>& placements);
  void SignalRanks(int signo);
  // Steps 3 and 4; returns the job's exit code.
  int Supervise();
  void OnRankExit(size_t serial, const ExitStatus& status);
  void BeginShutdown(Clock::time_point now);
  // Step 5.
  void StopDaemon();

  // Elastic jobs.
  absl::StatusOr<std::vector<HostSlots>> DiscoverInitialHosts();
  // Runs discovery once, to the end; CANCELLED if a signal arrives.
  absl::StatusOr<std::vector<HostSlots>> AwaitDiscovery();
  absl::Status StartDiscovery(Clock::time_point now);
  void StepElastic(Clock::time_point now);
  void StepDiscovery(Clock::time_point now);
  void ApplyHosts(const std::vector<HostSlots>& hosts, Clock::time_point now);
  // `hosts` without the ones this job cannot reach (when it is bound to the
  // one host it started on, every other), each reported once, and with this
  // machine under one name throughout (discovery may change "localhost" to
  // the hostname between runs).
  std::vector<HostSlots> Reachable(const std::vector<HostSlots>& hosts);
  JoinerSlot PlaceJoiner(const std::string& host) const;
  void StartJoiner(const std::string& host, Clock::time_point now);
  // What happens to a host after a failure there (restart, blocklist).
  void ReportHostFailure(const ElasticController::Verdict& verdict, Clock::time_point now);

  const LaunchOptions& options_;
  const bool elastic_;
  std::string job_id_;
  std::string token_;
  std::string socket_;  // KOLO_SOCKET of ranks on this machine.
  // The job may have ranks on several hosts: it started on several, or it
  // is elastic with several hosts in its first list or with --coordinator.
  // It then uses the system kolod and gives every rank KOLO_COORDINATOR.
  bool may_span_ = false;
  std::string coordinator_;
  std::unique_ptr<SignalCatcher> signals_;
  OutputPump pump_;
  std::vector<int> pending_signals_;
  int interrupted_by_ = 0;  // The signal that stopped the start, if any.

  // Shutdown (step 4).
  std::optional<int> exit_code_;
  std::optional<Clock::time_point> term_at_;
  std::optional<Clock::time_point> kill_at_;
  bool daemon_exit_reported_ = false;

  // Elastic jobs only.
  std::unique_ptr<ElasticController> controller_;
  std::unique_ptr<HostDiscovery> discovery_;
  Clock::time_point next_discovery_;
  std::set<std::string> ignored_hosts_;
  // The host the job started on (its first rank's), and the name this
  // machine has in the host lists once one has named it.
  RankPlacement home_;
  std::optional<std::string> local_name_;
  std::optional<int> last_failure_code_;

  // Declared before the children so that it is removed after they are gone.
  std::unique_ptr<TempDir> daemon_dir_;
  std::unique_ptr<Subprocess> daemon_;
  std::vector<RankProcess> ranks_;
};

}  // namespace kolo::kolorun
