#include "client/kolorun/job_runner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/un.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/kolorun/remote_shell.h"
#include "common/errno_status.h"
#include "common/random_id.h"
#include "common/status_macros.h"

namespace kolo::kolorun {
namespace {

using Clock = std::chrono::steady_clock;
using Verdict = ElasticController::Verdict;

// The longest a poll waits before the supervisor looks at its children and
// deadlines again; it bounds how late an exit is noticed where the kernel has
// no pidfd, and how late an elastic restart starts.
constexpr auto kMaxPollWait = std::chrono::milliseconds(100);
// How often a starting private kolod's socket is probed.
constexpr auto kDaemonProbeInterval = std::chrono::milliseconds(20);

// ssh's exit status when ssh itself failed (or the remote side was killed).
constexpr int kSshFailureStatus = 255;

int PollTimeoutMs(Clock::duration wait) {
  if (wait <= Clock::duration::zero()) return 0;
  // Round up so that a poll never returns just before its deadline.
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count());
}

std::string HostsText(const std::vector<HostSlots>& hosts) {
  if (hosts.empty()) return "none";
  return absl::StrJoin(hosts, ",", [](std::string* out, const HostSlots& h) {
    absl::StrAppend(out, h.host.empty() ? "this machine" : h.host, ":", h.slots);
  });
}

int TotalSlots(const std::vector<HostSlots>& hosts) {
  int total = 0;
  for (const HostSlots& h : hosts) total += h.slots;
  return total;
}

std::string HostText(const std::string& host) {
  return host.empty() ? "this machine" : absl::StrCat("host ", host);
}

// <dir>/<name>, truncated, for a copy of a rank's output; `dir` is made as
// needed.
absl::StatusOr<UniqueFd> CreateOutputFile(const std::string& dir, const char* name) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat("--output-filename: ", dir, ": ", error.message()));
  }
  const std::string path = absl::StrCat(dir, "/", name);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoToStatus(errno, absl::StrCat("--output-filename: opening ", path));
  return fd;
}

}  // namespace

// A directory made with mkdtemp and removed, with its contents, on
// destruction.
// Thread-safety: owned by one thread.
class TempDir {
 public:
  static absl::StatusOr<std::unique_ptr<TempDir>> Create(const std::string& root) {
    std::string templ = absl::StrCat(root, "/kolorun.XXXXXX");
    if (::mkdtemp(templ.data()) == nullptr) {
      return ::kolo::ErrnoToStatus(errno, absl::StrCat("mkdtemp ", templ));
    }
    return std::unique_ptr<TempDir>(new TempDir(std::move(templ)));
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  const std::string path_;
};

JobRunner::JobRunner(const LaunchOptions& options)
    : options_(options), elastic_(options.elastic.enabled) {}

JobRunner::~JobRunner() = default;

absl::StatusOr<int> JobRunner::Run() {
  KOLO_ASSIGN_OR_RETURN(signals_, SignalCatcher::Create());
  job_id_ = options_.job_id.empty() ? absl::StrCat("job-", ::kolo::RandomHex(8)) : options_.job_id;
  token_ = ::kolo::RandomHex(16);

  std::vector<HostSlots> hosts = options_.hosts;
  int initial_ranks = options_.num_ranks;
  if (elastic_ && !options_.elastic.discovery_script.empty()) {
    if (!hosts.empty()) Message("--host-discovery-script names the hosts; ignoring -H");
    absl::StatusOr<std::vector<HostSlots>> found = DiscoverInitialHosts();
    if (!found.ok()) {
      if (interrupted_by_ != 0) return 128 + interrupted_by_;
      return found.status();
    }
    hosts = *std::move(found);
    initial_ranks = std::min(initial_ranks, TotalSlots(hosts));
  }
  KOLO_ASSIGN_OR_RETURN(const std::vector<RankPlacement> placements,
                        AssignRanks(hosts, initial_ranks, options_.this_host));
  home_ = placements.front();
  // An elastic job may use any host of its list, not only those its first
  // ranks run on.
  may_span_ = HostsUsed(placements) > 1 ||
              (elastic_ && (hosts.size() > 1 || !options_.coordinator.empty()));
  if (may_span_ && options_.private_daemon) {
    // ValidateOptions catches this unless the hosts came from discovery.
    return absl::InvalidArgumentError(absl::StrCat(
        "--private_daemon cannot serve a job spanning hosts (", HostsText(hosts),
        "): the other hosts could not reach a private kolod (it listens on 127.0.0.1 only)"));
  }
  if (may_span_) {
    coordinator_ = options_.coordinator;
    if (coordinator_.empty()) {
      KOLO_ASSIGN_OR_RETURN(coordinator_, CoordinatorAddress(placements.front(), options_.this_host,
                                                             options_.peer_port));
    }
  }

  absl::StatusOr<std::string> socket = EnsureDaemon(placements);
  if (!socket.ok()) {
    StopDaemon();
    if (interrupted_by_ != 0) return 128 + interrupted_by_;
    return socket.status();
  }
  socket_ = *std::move(socket);
  if (elastic_) {
    if (hosts.empty()) hosts = {HostSlots{.host = "", .slots = options_.num_ranks}};
    controller_ = std::make_unique<ElasticController>(options_.elastic, Reachable(hosts));
  }
  if (absl::Status s = StartInitialRanks(placements); !s.ok()) {
    ranks_.clear();  // Kills and reaps whatever started.
    pump_.Close(std::nullopt);
    StopDaemon();
    return s;
  }
  const int code = Supervise();
  StopDaemon();
  return code;
}

void JobRunner::Message(absl::string_view text) {
  WriteAll(options_.stderr_fd, absl::StrCat("kolorun: ", text, "\n"));
}

// Waits up to `max_wait` for output, a signal or a child's exit; copies
// output and queues signals in pending_signals_.
void JobRunner::PollOnce(Clock::duration max_wait) {
  pump_.DropClosed();
  std::vector<pollfd> fds;
  fds.push_back({.fd = signals_->fd(), .events = POLLIN, .revents = 0});
  const size_t first_stream = fds.size();
  for (size_t i = 0; i < pump_.size(); ++i) {
    fds.push_back({.fd = pump_.fd(i), .events = POLLIN, .revents = 0});
  }
  for (const RankProcess& rank : ranks_) {
    if (rank.child->exit_fd() >= 0) {
      fds.push_back({.fd = rank.child->exit_fd(), .events = POLLIN, .revents = 0});
    }
  }
  if (daemon_ && daemon_->exit_fd() >= 0) {
    fds.push_back({.fd = daemon_->exit_fd(), .events = POLLIN, .revents = 0});
  }
  if (discovery_) {
    for (int fd : discovery_->PollFds()) fds.push_back({.fd = fd, .events = POLLIN, .revents = 0});
  }
  const int n = ::poll(fds.data(), fds.size(), PollTimeoutMs(max_wait));
  if (n <= 0) return;  // Timeout, or EINTR: the caller looks again.
  if (fds[0].revents != 0) {
    for (int signo : signals_->Read()) pending_signals_.push_back(signo);
  }
  for (size_t i = 0; i < pump_.size(); ++i) {
    if (fds[first_stream + i].revents != 0) pump_.Read(i);
  }
}

std::vector<int> JobRunner::TakeSignals() { return std::exchange(pending_signals_, {}); }

absl::Status JobRunner::TakeInterrupt(absl::string_view while_doing) {
  std::vector<int> sigs = TakeSignals();
  if (sigs.empty()) return absl::OkStatus();
  interrupted_by_ = sigs.front();
  Message(absl::StrCat("interrupted by ", SignalName(interrupted_by_), while_doing));
  return absl::CancelledError("interrupted");
}

absl::Status JobRunner::WaitUntil(Clock::time_point t) {
  while (true) {
    if (absl::Status s = TakeInterrupt(""); !s.ok()) return s;
    const Clock::time_point now = Clock::now();
    if (now >= t) return absl::OkStatus();
    PollOnce(std::min<Clock::duration>(kMaxPollWait, t - now));
  }
}

// "rank 3" or "rank 3 on hostB"; in an elastic job, where kolod numbers the
// ranks, "process [3]" after the output prefix.
std::string JobRunner::Label(size_t serial, const RankPlacement& place) const {
  std::string label =
      elastic_ ? absl::StrCat("process [", serial, "]") : absl::StrCat("rank ", serial);
  if (!place.host.empty()) absl::StrAppend(&label, " on ", place.host);
  return label;
}

std::string JobRunner::ExitText(size_t serial, const ExitStatus& status) const {
  const RankPlacement& place = ranks_[serial].place;
  const bool ssh_failed = !place.local && !status.signaled && status.value == kSshFailureStatus;
  return absl::StrCat(Label(serial), " ", status.Describe(),
                      ssh_failed ? absl::StrCat(" (also ssh's own failure status: check that `",
                                                options_.ssh_program, " -o BatchMode=yes ",
                                                place.host, " true` works)")
                                 : "");
}

size_t JobRunner::Running() const {
  return static_cast<size_t>(std::count_if(
      ranks_.begin(), ranks_.end(), [](const RankProcess& r) { return !r.child->reaped(); }));
}

// Step 1: the socket the local ranks will use, starting a private kolod if
// needed ("" when no rank runs here).
absl::StatusOr<std::string> JobRunner::EnsureDaemon(const std::vector<RankPlacement>& placements) {
  const bool any_local = std::any_of(placements.begin(), placements.end(),
                                     [](const RankPlacement& p) { return p.local; });
  // A job that may span hosts may start joiners here later: they use the
  // system kolod, whose socket is checked when they attach.
  if (!any_local) return may_span_ ? options_.socket_path : std::string();
  if (may_span_) {
    // ValidateOptions has refused private_daemon for such a job.
    if (SocketAccepts(options_.socket_path)) return options_.socket_path;
    return absl::FailedPreconditionError(
        absl::StrCat("no kolod accepts connections on ", options_.socket_path, " on this machine (",
                     options_.this_host,
                     "); a job spanning hosts needs the system kolod running on every "
                     "host, reachable on its peer address (a private kolod would "
                     "listen on 127.0.0.1 only, out of the other hosts' reach)"));
  }
  if (!options_.private_daemon) {
    if (SocketAccepts(options_.socket_path)) return options_.socket_path;
    Message(absl::StrCat("no kolod accepts connections on ", options_.socket_path,
                         "; starting a private one"));
  }
  KOLO_ASSIGN_OR_RETURN(const std::string kolod, FindKolod(options_.kolod));
  std::string root = options_.temp_root.empty() ? "/tmp" : options_.temp_root;
  constexpr size_t kSuffix = sizeof("/kolorun.XXXXXX/kolod.sock") - 1;
  if (root.size() + kSuffix >= sizeof(sockaddr_un::sun_path)) root = "/tmp";
  KOLO_ASSIGN_OR_RETURN(daemon_dir_, TempDir::Create(root));
  const std::string socket = absl::StrCat(daemon_dir_->path(), "/kolod.sock");

  SpawnOptions spawn;
  // Its status port is shown by `koloctl --socket ... status`.
  spawn.argv = PrivateKolodArgv(kolod, socket);
  spawn.argv.insert(spawn.argv.end(), options_.kolod_args.begin(), options_.kolod_args.end());
  for (const std::string& entry : options_.base_env) {
    if (!absl::StartsWith(entry, "KOLO_SOCKET=")) spawn.env.push_back(entry);
  }
  spawn.env.push_back(absl::StrCat("KOLO_SOCKET=", socket));
  absl::StatusOr<std::unique_ptr<Subprocess>> daemon = Subprocess::Spawn(spawn);
  if (!daemon.ok()) {
    return absl::Status(daemon.status().code(),
                        absl::StrCat("starting kolod: ", daemon.status().message()));
  }
  daemon_ = *std::move(daemon);
  pump_.Add(OutputPump::kDaemonOwner, std::move(daemon_->stdout_pipe()), "[kolod] ",
            options_.stderr_fd);
  pump_.Add(OutputPump::kDaemonOwner, std::move(daemon_->stderr_pipe()), "[kolod] ",
            options_.stderr_fd);

  const Clock::time_point deadline = Clock::now() + ToClock(options_.daemon_start_timeout);
  while (true) {
    if (SocketAccepts(socket)) return socket;
    if (absl::Status s = TakeInterrupt(" while starting kolod"); !s.ok()) return s;
    if (std::optional<ExitStatus> st = daemon_->TryReap()) {
      pump_.DrainNow(OutputPump::kDaemonOwner);
      return absl::UnavailableError(absl::StrCat("private kolod ", kolod, " ", st->Describe(),
                                                 " before accepting connections on ", socket));
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("private kolod ", kolod, " did not accept connections on ", socket,
                       " within ", absl::FormatDuration(options_.daemon_start_timeout)));
    }
    PollOnce(std::min<Clock::duration>(kDaemonProbeInterval, deadline - now));
  }
}

// Step 2, for one process: serial ranks_.size().
absl::Status JobRunner::SpawnRank(const RankPlacement& place, int rank, int size, bool joiner) {
  RankIdentity id{
      .socket_path = place.local ? socket_ : options_.remote_socket_path,
      .job_id = job_id_,
      .job_token = token_,
      .coordinator = coordinator_,
      .rank = rank,
      .size = size,
      .local_rank = place.local_rank,
      .local_size = place.local_size,
  };
  if (elastic_) {
    id.elastic = true;
    id.elastic_min_size = options_.elastic.min_ranks;
    id.elastic_max_size = options_.elastic.max_ranks;
    id.joiner = joiner;
  }
  SpawnOptions spawn;
  if (place.local) {
    spawn.argv = options_.command;
    spawn.env = RankEnvironment(options_.base_env, id);
  } else {
    // The remote rank gets the KOLO_* variables on ssh's command line
    // (sshd passes no environment through); ssh itself runs in
    // kolorun's environment (SSH_AUTH_SOCK and the like).
    SshCommand ssh{.ssh_program = options_.ssh_program,
                   .ssh_args = options_.ssh_args,
                   .host = place.host,
                   .env = {},
                   .command = options_.command};
    for (std::string& entry : RankEnvironment(options_.base_env, id)) {
      if (absl::StartsWith(entry, "KOLO_")) ssh.env.push_back(std::move(entry));
    }
    spawn.argv = SshArgv(ssh);
    spawn.env = options_.base_env;
  }
  const int serial = static_cast<int>(ranks_.size());
  UniqueFd stdout_copy, stderr_copy;
  if (!options_.output_dir.empty()) {
    const std::string dir = absl::StrCat(options_.output_dir, "/rank.", serial);
    KOLO_ASSIGN_OR_RETURN(stdout_copy, CreateOutputFile(dir, "stdout"));
    KOLO_ASSIGN_OR_RETURN(stderr_copy, CreateOutputFile(dir, "stderr"));
  }
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> child, Subprocess::Spawn(spawn));
  const std::string prefix = absl::StrCat("[", serial, "] ");
  pump_.Add(serial, std::move(child->stdout_pipe()), prefix, options_.stdout_fd,
            std::move(stdout_copy));
  pump_.Add(serial, std::move(child->stderr_pipe()), prefix, options_.stderr_fd,
            std::move(stderr_copy));
  ranks_.push_back(RankProcess{.child = std::move(child), .place = place, .rank = rank});
  return absl::OkStatus();
}

absl::Status JobRunner::StartInitialRanks(const std::vector<RankPlacement>& placements) {
  const int size = static_cast<int>(placements.size());
  for (int rank = 0; rank < size; ++rank) {
    const RankPlacement& place = placements[static_cast<size_t>(rank)];
    if (absl::Status s = SpawnRank(place, rank, size, /*joiner=*/false); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("starting ", Label(ranks_.size(), place),
                                       place.local ? "" : " (over ssh)", ": ", s.message()));
    }
    if (controller_) controller_->OnStarted(rank, place.host);
  }
  return absl::OkStatus();
}

void JobRunner::SignalRanks(int signo) {
  for (RankProcess& rank : ranks_) rank.child->SignalGroup(signo);
}

void JobRunner::BeginShutdown(Clock::time_point now) {
  if (!term_at_.has_value()) term_at_ = now + ToClock(options_.grace);
  if (controller_) controller_->Stop();
  discovery_.reset();
}

int JobRunner::Supervise() {
  // An elastic job goes on without running ranks while it may start some.
  auto more = [this] { return Running() > 0 || (controller_ && controller_->growing()); };
  while (more()) {
    for (int signo : TakeSignals()) {
      Message(absl::StrCat("received ", SignalName(signo), "; forwarding it to the ranks"));
      SignalRanks(signo);
      BeginShutdown(Clock::now());
    }
    for (size_t serial = 0; serial < ranks_.size(); ++serial) {
      Subprocess& child = *ranks_[serial].child;
      if (child.reaped()) continue;
      std::optional<ExitStatus> st = child.TryReap();
      if (!st.has_value()) continue;
      // Output the rank wrote before it died comes before the verdict.
      pump_.DrainNow(static_cast<int>(serial));
      OnRankExit(serial, *st);
    }
    if (controller_) StepElastic(Clock::now());
    const size_t running = Running();
    if (!more()) break;
    if (daemon_ && !daemon_exit_reported_) {
      if (std::optional<ExitStatus> st = daemon_->TryReap()) {
        daemon_exit_reported_ = true;
        Message(absl::StrCat("private kolod ", st->Describe(), " while ranks were running"));
      }
    }

    const Clock::time_point now = Clock::now();
    if (term_at_.has_value() && !kill_at_.has_value() && now >= *term_at_) {
      Message(absl::StrCat("sending SIGTERM to ", running,
                           running == 1 ? " remaining rank" : " remaining ranks"));
      SignalRanks(SIGTERM);
      kill_at_ = now + ToClock(options_.kill_grace);
    } else if (kill_at_.has_value() && now >= *kill_at_) {
      Message(absl::StrCat("sending SIGKILL to ", running,
                           running == 1 ? " remaining rank" : " remaining ranks"));
      SignalRanks(SIGKILL);
      kill_at_ = Clock::time_point::max();  // Sent once.
    }

    Clock::duration wait = kMaxPollWait;
    if (term_at_.has_value() && !kill_at_.has_value()) {
      wait = std::min(wait, *term_at_ - now);
    } else if (kill_at_.has_value() && *kill_at_ != Clock::time_point::max()) {
      wait = std::min(wait, *kill_at_ - now);
    }
    PollOnce(wait);
  }

  // Whatever the ranks started may still hold their pipes open.
  const Clock::time_point drain_deadline = Clock::now() + ToClock(options_.output_drain_timeout);
  while (pump_.AnyRankStreamOpen()) {
    const Clock::time_point now = Clock::now();
    if (now >= drain_deadline) break;
    PollOnce(std::min<Clock::duration>(kMaxPollWait, drain_deadline - now));
    TakeSignals();  // Every rank has exited: nothing left to forward to.
  }
  pump_.Close(std::nullopt);
  pump_.Close(OutputPump::kDiscoveryOwner);
  return exit_code_.value_or(0);
}

void JobRunner::OnRankExit(size_t serial, const ExitStatus& status) {
  const Clock::time_point now = Clock::now();
  if (!controller_) {
    if (status.success()) return;
    Message(ExitText(serial, status));
    if (!exit_code_.has_value()) {
      exit_code_ = status.ShellCode();
      BeginShutdown(now);
    }
    return;
  }
  const Verdict verdict = controller_->OnExited(static_cast<int>(serial), status, now);
  switch (verdict.kind) {
    case Verdict::Kind::kStopped:
      Message(absl::StrCat(ExitText(serial, status), " (stopped: its host left the host list)"));
      return;
    case Verdict::Kind::kSucceeded:
      if (verdict.first_success) {
        Message(absl::StrCat(Label(serial),
                             " exited with status 0; the job is finishing: no more restarts or "
                             "new ranks"));
      }
      return;
    case Verdict::Kind::kLateJoiner:
      Message(absl::StrCat(ExitText(serial, status),
                           " (a joiner started as the job finished: nothing left to join; not "
                           "counted as a failure)"));
      return;
    case Verdict::Kind::kEnding:
      Message(ExitText(serial, status));
      if (!exit_code_.has_value()) {
        exit_code_ = status.ShellCode();
        BeginShutdown(now);
      }
      return;
    default:
      last_failure_code_ = status.ShellCode();
      Message(ExitText(serial, status));
      ReportHostFailure(verdict, now);
      return;
  }
}

void JobRunner::ReportHostFailure(const Verdict& verdict, Clock::time_point now) {
  const std::string host = HostText(verdict.host);
  switch (verdict.kind) {
    case Verdict::Kind::kRestart:
      Message(absl::StrCat("restarting it on ", host, " as a joiner in ",
                           absl::FormatDuration(absl::FromChrono(verdict.restart_at - now)),
                           " (failure ", verdict.host_failures, " of --max-failures-per-host ",
                           options_.elastic.max_failures_per_host, " there)"));
      return;
    case Verdict::Kind::kBlocklisted:
      Message(absl::StrCat(
          host, " has failed ", verdict.host_failures, " time(s) (--max-failures-per-host ",
          options_.elastic.max_failures_per_host, "); blocklisting it: no more ranks start there"));
      return;
    case Verdict::Kind::kNotRestarted:
      Message(absl::StrCat(
          "not restarting it: ", host,
          controller_->blocklisted(verdict.host) ? " is blocklisted" : " has left the host list"));
      return;
    default:
      return;
  }
}

// Step 5.
void JobRunner::StopDaemon() {
  if (daemon_ != nullptr) {
    if (!daemon_->reaped()) daemon_->SignalGroup(SIGTERM);
    const Clock::time_point kill_at = Clock::now() + ToClock(options_.daemon_stop_grace);
    bool killed = false;
    while (!daemon_->TryReap().has_value()) {
      const Clock::time_point now = Clock::now();
      if (!killed && now >= kill_at) {
        Message("private kolod did not stop after SIGTERM; sending SIGKILL");
        daemon_->SignalGroup(SIGKILL);
        killed = true;
      }
      PollOnce(killed ? kMaxPollWait : std::min<Clock::duration>(kMaxPollWait, kill_at - now));
    }
    pump_.DrainNow(OutputPump::kDaemonOwner);
    pump_.Close(OutputPump::kDaemonOwner);
    daemon_.reset();
  }
  daemon_dir_.reset();
}

// Elastic jobs ---------------------------------------------------------------

absl::StatusOr<std::vector<HostSlots>> JobRunner::DiscoverInitialHosts() {
  const ElasticOptions& elastic = options_.elastic;
  discovery_ = std::make_unique<HostDiscovery>(elastic.discovery_script, options_.base_env,
                                               options_.this_host, elastic.discovery_timeout);
  const Clock::time_point give_up = Clock::now() + ToClock(elastic.elastic_timeout);
  bool reported = false;
  while (true) {
    // A script that fails at the start is a mistake to report now, not a
    // passing trouble to wait out.
    KOLO_ASSIGN_OR_RETURN(std::vector<HostSlots> hosts, AwaitDiscovery());
    const int slots = TotalSlots(hosts);
    const Clock::time_point next = Clock::now() + ToClock(elastic.discovery_interval);
    if (slots >= elastic.min_ranks) {
      next_discovery_ = next;
      return hosts;
    }
    if (next > give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("host discovery found ", slots, " slot(s) (", HostsText(hosts),
                       "), fewer than --min-np ", elastic.min_ranks, ", for ",
                       absl::FormatDuration(elastic.elastic_timeout), " (--elastic-timeout-s)"));
    }
    if (!reported) {
      Message(absl::StrCat("host discovery found ", slots, " slot(s), fewer than --min-np ",
                           elastic.min_ranks, "; waiting up to ",
                           absl::FormatDuration(elastic.elastic_timeout), " for more"));
      reported = true;
    }
    KOLO_RETURN_IF_ERROR(WaitUntil(next));
  }
}

absl::StatusOr<std::vector<HostSlots>> JobRunner::AwaitDiscovery() {
  KOLO_RETURN_IF_ERROR(StartDiscovery(Clock::now()));
  while (true) {
    if (auto result = discovery_->Service(Clock::now())) {
      pump_.DrainNow(OutputPump::kDiscoveryOwner);
      return *std::move(result);
    }
    if (absl::Status s = TakeInterrupt(" during host discovery"); !s.ok()) return s;
    PollOnce(kMaxPollWait);
  }
}

absl::Status JobRunner::StartDiscovery(Clock::time_point now) {
  absl::StatusOr<UniqueFd> stderr_pipe = discovery_->Start(now);
  if (!stderr_pipe.ok()) {
    return absl::Status(stderr_pipe.status().code(),
                        absl::StrCat("--host-discovery-script: ", stderr_pipe.status().message()));
  }
  pump_.Add(OutputPump::kDiscoveryOwner, *std::move(stderr_pipe), "[discovery] ",
            options_.stderr_fd);
  return absl::OkStatus();
}

void JobRunner::StepElastic(Clock::time_point now) {
  StepDiscovery(now);
  for (RankProcess& rank : ranks_) {
    if (rank.kill_at.has_value() && now >= *rank.kill_at) {
      rank.child->SignalGroup(SIGKILL);  // Nothing when it is already reaped.
      rank.kill_at.reset();
    }
  }
  for (const std::string& host : controller_->TakeDueStarts(now)) StartJoiner(host, now);
  if (std::optional<int> left = controller_->CheckMinimum(now)) {
    Message(absl::StrCat("job ", job_id_, ": ", *left, " rank(s) remain, fewer than --min-np ",
                         options_.elastic.min_ranks, "; ending the job"));
    if (!exit_code_.has_value()) exit_code_ = last_failure_code_.value_or(1);
    // No --grace_s here: kolod forms no epoch below --min-np, so the ranks
    // left wait in a reset that cannot end and would never finish by
    // themselves; SIGTERM them now (SIGKILL after --kill_grace_s).
    if (!term_at_.has_value() || *term_at_ > now) term_at_ = now;
    BeginShutdown(now);
  }
}

void JobRunner::StepDiscovery(Clock::time_point now) {
  if (discovery_ == nullptr) return;
  if (!controller_->growing()) {
    // Nothing is added any more: a run in flight is killed and reaped (or
    // its exit and output would keep the poll loop awake).
    discovery_.reset();
    return;
  }
  if (!discovery_->running()) {
    if (now < next_discovery_) return;
    if (absl::Status s = StartDiscovery(now); !s.ok()) {
      Message(absl::StrCat(s.message(), "; keeping the previous host list"));
      next_discovery_ = now + ToClock(options_.elastic.discovery_interval);
    }
    return;
  }
  std::optional<absl::StatusOr<std::vector<HostSlots>>> result = discovery_->Service(now);
  if (!result.has_value()) return;
  pump_.DrainNow(OutputPump::kDiscoveryOwner);
  next_discovery_ = now + ToClock(options_.elastic.discovery_interval);
  if (!result->ok()) {
    Message(absl::StrCat(result->status().message(), "; keeping the previous host list"));
    return;
  }
  ApplyHosts(**result, now);
}

void JobRunner::ApplyHosts(const std::vector<HostSlots>& found, Clock::time_point now) {
  std::vector<HostSlots> hosts = Reachable(found);
  if (hosts == controller_->hosts()) return;
  Message(absl::StrCat("host discovery: hosts now ", HostsText(hosts), " (were ",
                       HostsText(controller_->hosts()), ")"));
  for (int serial : controller_->SetHosts(std::move(hosts))) {
    RankProcess& rank = ranks_[static_cast<size_t>(serial)];
    Message(absl::StrCat(Label(static_cast<size_t>(serial)),
                         ": its host left the host list; stopping it"));
    rank.leaving = true;
    rank.child->SignalGroup(SIGTERM);
    rank.kill_at = now + ToClock(options_.kill_grace);
  }
}

std::vector<HostSlots> JobRunner::Reachable(const std::vector<HostSlots>& hosts) {
  std::vector<HostSlots> out;
  for (HostSlots h : hosts) {
    const bool here = h.host.empty() || IsThisMachine(h.host, options_.this_host);
    if (here) {
      if (!local_name_.has_value()) local_name_ = h.host;
      h.host = *local_name_;
    }
    if (may_span_ || (home_.local ? here : h.host == home_.host)) {
      out.push_back(std::move(h));
    } else if (ignored_hosts_.insert(h.host).second) {
      Message(absl::StrCat("ignoring host ", h.host, ": the job started on ",
                           home_.local ? "this machine" : absl::StrCat("host ", home_.host),
                           " only, so ranks elsewhere could not reach it (start it on several "
                           "hosts, or give --coordinator)"));
    }
  }
  return out;
}

JobRunner::JoinerSlot JobRunner::PlaceJoiner(const std::string& host) const {
  std::set<int> ranks_taken;
  std::set<int> local_ranks_taken;
  int live = 0;
  int live_here = 0;
  for (const RankProcess& r : ranks_) {
    if (r.child->reaped() || r.leaving) continue;
    ++live;
    ranks_taken.insert(r.rank);
    if (r.place.host == host) {
      ++live_here;
      local_ranks_taken.insert(r.place.local_rank);
    }
  }
  auto lowest_free = [](const std::set<int>& taken) {
    int i = 0;
    while (taken.count(i) > 0) ++i;
    return i;
  };
  JoinerSlot slot;
  slot.rank = lowest_free(ranks_taken);
  slot.size = std::max(live + 1, slot.rank + 1);
  slot.place.host = host;
  slot.place.local = host.empty() || IsThisMachine(host, options_.this_host);
  slot.place.local_rank = lowest_free(local_ranks_taken);
  slot.place.local_size = std::max(live_here + 1, slot.place.local_rank + 1);
  return slot;
}

void JobRunner::StartJoiner(const std::string& host, Clock::time_point now) {
  const JoinerSlot slot = PlaceJoiner(host);
  const size_t serial = ranks_.size();
  if (absl::Status s = SpawnRank(slot.place, slot.rank, slot.size, /*joiner=*/true); !s.ok()) {
    Message(absl::StrCat("starting ", Label(serial, slot.place), " as a joiner",
                         slot.place.local ? "" : " (over ssh)", ": ", s.message()));
    ReportHostFailure(controller_->OnStartFailed(host, now), now);
    return;
  }
  controller_->OnStarted(static_cast<int>(serial), host, /*joiner=*/true);
  Message(absl::StrCat("started ", Label(serial), " as a joiner"));
}

}  // namespace kolo::kolorun
