#include "client/kolorun/launcher.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/kolorun/hosts.h"
#include "client/kolorun/line_prefixer.h"
#include "client/kolorun/remote_shell.h"
#include "client/kolorun/subprocess.h"
#include "common/errno_status.h"
#include "common/random_id.h"
#include "common/status_macros.h"

namespace kolo::kolorun {
namespace {

using Clock = std::chrono::steady_clock;

// The longest a poll waits before the supervisor looks at its children and
// deadlines again; it bounds how late an exit is noticed where the kernel has
// no pidfd.
constexpr auto kMaxPollWait = std::chrono::milliseconds(100);
// How often a starting private kolod's socket is probed.
constexpr auto kDaemonProbeInterval = std::chrono::milliseconds(20);

constexpr std::array<const char*, 8> kRankVariables = {
    "KOLO_SOCKET", "KOLO_JOB_ID",     "KOLO_JOB_TOKEN",  "KOLO_RANK",
    "KOLO_SIZE",   "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_COORDINATOR"};

// ssh's exit status when ssh itself failed (or the remote side was killed).
constexpr int kSshFailureStatus = 255;

Clock::duration ToClock(absl::Duration d) {
  return std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(d));
}

int PollTimeoutMs(Clock::duration wait) {
  if (wait <= Clock::duration::zero()) return 0;
  // Round up so that a poll never returns just before its deadline.
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count());
}

// Writes all of `data` unless the reader has gone (then the rest is dropped:
// a closed stdout must not stop the job).
void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
      ::poll(&p, 1, -1);
    } else {
      return;
    }
  }
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and makes them
// readable from a signalfd; on destruction discards what is still pending and
// restores the previous mask.
// Thread-safety: owned by the thread that created it.
class SignalCatcher {
 public:
  static absl::StatusOr<std::unique_ptr<SignalCatcher>> Create() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigset_t old_mask;
    if (const int rc = ::pthread_sigmask(SIG_BLOCK, &set, &old_mask); rc != 0) {
      return ::kolo::ErrnoToStatus(rc, "pthread_sigmask");
    }
    UniqueFd fd(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
    if (!fd.valid()) {
      const int err = errno;
      ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
      return ::kolo::ErrnoToStatus(err, "signalfd");
    }
    return std::unique_ptr<SignalCatcher>(new SignalCatcher(old_mask, std::move(fd)));
  }
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;
  ~SignalCatcher() {
    Read();
    ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }

  int fd() const { return fd_.get(); }

  // The signals received since the last call, in arrival order.
  std::vector<int> Read() {
    std::vector<int> out;
    signalfd_siginfo info;
    while (::read(fd_.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      out.push_back(static_cast<int>(info.ssi_signo));
    }
    return out;
  }

 private:
  SignalCatcher(sigset_t old_mask, UniqueFd fd) : old_mask_(old_mask), fd_(std::move(fd)) {}

  sigset_t old_mask_;
  UniqueFd fd_;
};

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

// Copies the children's pipes to kolorun's descriptors, each line prefixed.
// Streams are tagged with an owner (a rank, or kDaemonOwner) so that one
// child's streams can be drained or closed together.
// Thread-safety: owned by the supervising thread.
class OutputPump {
 public:
  static constexpr int kDaemonOwner = -1;

  void Add(int owner, UniqueFd fd, const std::string& prefix, int dest_fd) {
    auto stream = std::make_unique<Stream>();
    stream->owner = owner;
    stream->fd = std::move(fd);
    stream->prefixer = std::make_unique<LinePrefixer>(
        prefix, [dest_fd](std::string_view lines) { WriteAll(dest_fd, lines); });
    streams_.push_back(std::move(stream));
  }

  size_t size() const { return streams_.size(); }
  int fd(size_t i) const { return streams_[i]->fd.get(); }

  // Reads what stream `i` has now (a bounded amount, so one chatty child
  // cannot starve the others); closes it at EOF.
  void Read(size_t i) {
    Stream& s = *streams_[i];
    std::array<char, 64 << 10> buf;
    for (int reads = 0; reads < 16 && s.fd.valid(); ++reads) {
      const ssize_t n = ::read(s.fd.get(), buf.data(), buf.size());
      if (n > 0) {
        s.prefixer->Append(std::string_view(buf.data(), static_cast<size_t>(n)));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      } else {
        CloseStream(s);  // EOF or a read error.
      }
    }
  }

  // Reads everything `owner`'s streams hold right now, without waiting.
  void DrainNow(int owner) {
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (streams_[i]->owner != owner) continue;
      while (streams_[i]->fd.valid()) {
        pollfd p{.fd = streams_[i]->fd.get(), .events = POLLIN, .revents = 0};
        if (::poll(&p, 1, 0) <= 0) break;
        Read(i);
      }
    }
  }

  // True while any stream of a child other than the daemon is open.
  bool AnyRankStreamOpen() const {
    return std::any_of(streams_.begin(), streams_.end(),
                       [](const auto& s) { return s->owner != kDaemonOwner && s->fd.valid(); });
  }
  bool AnyOpen(int owner) const {
    return std::any_of(streams_.begin(), streams_.end(),
                       [owner](const auto& s) { return s->owner == owner && s->fd.valid(); });
  }

  // Flushes partial lines and closes the streams of `owner`, or of every
  // child other than the daemon when `owner` is nullopt.
  void Close(std::optional<int> owner) {
    for (auto& s : streams_) {
      if (owner.has_value() ? s->owner == *owner : s->owner != kDaemonOwner) {
        CloseStream(*s);
      }
    }
  }

 private:
  struct Stream {
    int owner = 0;
    UniqueFd fd;
    std::unique_ptr<LinePrefixer> prefixer;
  };

  static void CloseStream(Stream& s) {
    s.prefixer->Flush();
    s.fd.Reset();
  }

  std::vector<std::unique_ptr<Stream>> streams_;
};

// Drives one job through steps 1-5 of launcher.h.
// Thread-safety: used by one thread, the one that called RunJob.
class JobRunner {
 public:
  explicit JobRunner(const LaunchOptions& options) : options_(options) {}

  absl::StatusOr<int> Run() {
    KOLO_ASSIGN_OR_RETURN(placements_,
                          AssignRanks(options_.hosts, options_.num_ranks, options_.this_host));
    spans_hosts_ = HostsUsed(placements_) > 1;
    if (spans_hosts_) {
      coordinator_ = options_.coordinator;
      if (coordinator_.empty()) {
        KOLO_ASSIGN_OR_RETURN(
            coordinator_,
            CoordinatorAddress(placements_.front(), options_.this_host, options_.peer_port));
      }
    }
    KOLO_ASSIGN_OR_RETURN(signals_, SignalCatcher::Create());
    std::string job_id = options_.job_id;
    if (job_id.empty()) {
      job_id = absl::StrCat("job-", ::kolo::RandomHex(8));
    }
    const std::string token = ::kolo::RandomHex(16);

    absl::StatusOr<std::string> socket = EnsureDaemon();
    if (!socket.ok()) {
      StopDaemon();
      if (interrupted_by_ != 0) return 128 + interrupted_by_;
      return socket.status();
    }
    if (absl::Status s = StartRanks(*socket, job_id, token); !s.ok()) {
      ranks_.clear();  // Kills and reaps whatever started.
      pump_.Close(std::nullopt);
      StopDaemon();
      return s;
    }
    const int code = Supervise();
    StopDaemon();
    return code;
  }

 private:
  void Message(absl::string_view text) {
    WriteAll(options_.stderr_fd, absl::StrCat("kolorun: ", text, "\n"));
  }

  // Waits up to `max_wait` for output, a signal or a child's exit; copies
  // output and queues signals in pending_signals_.
  void PollOnce(Clock::duration max_wait) {
    std::vector<pollfd> fds;
    fds.push_back({.fd = signals_->fd(), .events = POLLIN, .revents = 0});
    const size_t first_stream = fds.size();
    for (size_t i = 0; i < pump_.size(); ++i) {
      // A closed stream keeps its slot with fd -1, which poll skips.
      fds.push_back({.fd = pump_.fd(i), .events = POLLIN, .revents = 0});
    }
    for (const auto& rank : ranks_) {
      if (rank->exit_fd() >= 0) {
        fds.push_back({.fd = rank->exit_fd(), .events = POLLIN, .revents = 0});
      }
    }
    if (daemon_ && daemon_->exit_fd() >= 0) {
      fds.push_back({.fd = daemon_->exit_fd(), .events = POLLIN, .revents = 0});
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

  std::vector<int> TakeSignals() { return std::exchange(pending_signals_, {}); }

  // "rank 3", or "rank 3 on hostB" when the job was given hosts.
  std::string RankLabel(size_t rank) const {
    const RankPlacement& p = placements_[rank];
    if (p.host.empty()) return absl::StrCat("rank ", rank);
    return absl::StrCat("rank ", rank, " on ", p.host);
  }

  // Step 1: the socket the local ranks will use, starting a private kolod if
  // needed ("" when no rank runs here).
  absl::StatusOr<std::string> EnsureDaemon() {
    const bool any_local = std::any_of(placements_.begin(), placements_.end(),
                                       [](const RankPlacement& p) { return p.local; });
    if (!any_local) return std::string();
    if (spans_hosts_) {
      // ValidateOptions has refused private_daemon for such a job.
      if (SocketAccepts(options_.socket_path)) return options_.socket_path;
      return absl::FailedPreconditionError(
          absl::StrCat("no kolod accepts connections on ", options_.socket_path,
                       " on this machine (", options_.this_host,
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
    // A private daemon must not take the node's default status port: let the
    // kernel pick one (it is shown by `koloctl --socket ... status`). Its
    // job stays on this host, so it serves no Peer plane.
    spawn.argv = {kolod, "--socket", socket, "--status_address=127.0.0.1:0", "--peer_address="};
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
      if (std::vector<int> sigs = TakeSignals(); !sigs.empty()) {
        interrupted_by_ = sigs.front();
        Message(
            absl::StrCat("interrupted by ", SignalName(interrupted_by_), " while starting kolod"));
        return absl::CancelledError("interrupted");
      }
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

  // Step 2.
  absl::Status StartRanks(const std::string& socket, const std::string& job_id,
                          const std::string& token) {
    for (int rank = 0; rank < options_.num_ranks; ++rank) {
      const RankPlacement& place = placements_[static_cast<size_t>(rank)];
      const RankIdentity id{
          .socket_path = place.local ? socket : options_.remote_socket_path,
          .job_id = job_id,
          .job_token = token,
          .coordinator = coordinator_,
          .rank = rank,
          .size = options_.num_ranks,
          .local_rank = place.local_rank,
          .local_size = place.local_size,
      };
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
      absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(spawn);
      if (!child.ok()) {
        return absl::Status(
            child.status().code(),
            absl::StrCat("starting ", RankLabel(static_cast<size_t>(rank)),
                         place.local ? "" : " (over ssh)", ": ", child.status().message()));
      }
      const std::string prefix = absl::StrCat("[", rank, "] ");
      pump_.Add(rank, std::move((*child)->stdout_pipe()), prefix, options_.stdout_fd);
      pump_.Add(rank, std::move((*child)->stderr_pipe()), prefix, options_.stderr_fd);
      ranks_.push_back(*std::move(child));
    }
    return absl::OkStatus();
  }

  void SignalRanks(int signo) {
    for (auto& rank : ranks_) rank->SignalGroup(signo);
  }

  // Steps 3 and 4; returns the job's exit code.
  int Supervise() {
    std::optional<int> exit_code;  // The first failing rank's.
    std::optional<Clock::time_point> term_at;
    std::optional<Clock::time_point> kill_at;
    bool daemon_exit_reported = false;
    auto begin_shutdown = [&](Clock::time_point now) {
      if (!term_at.has_value()) term_at = now + ToClock(options_.grace);
    };

    size_t running = ranks_.size();
    while (running > 0) {
      for (int signo : TakeSignals()) {
        Message(absl::StrCat("received ", SignalName(signo), "; forwarding it to the ranks"));
        SignalRanks(signo);
        begin_shutdown(Clock::now());
      }
      for (size_t r = 0; r < ranks_.size(); ++r) {
        if (ranks_[r]->reaped()) continue;
        std::optional<ExitStatus> st = ranks_[r]->TryReap();
        if (!st.has_value()) continue;
        --running;
        // Output the rank wrote before it died comes before the verdict.
        pump_.DrainNow(static_cast<int>(r));
        if (st->success()) continue;
        const bool ssh_failed =
            !placements_[r].local && !st->signaled && st->value == kSshFailureStatus;
        Message(absl::StrCat(RankLabel(r), " ", st->Describe(),
                             ssh_failed ? absl::StrCat(" (also ssh's own failure status: check "
                                                       "that `",
                                                       options_.ssh_program, " -o BatchMode=yes ",
                                                       placements_[r].host, " true` works)")
                                        : ""));
        if (!exit_code.has_value()) {
          exit_code = st->ShellCode();
          begin_shutdown(Clock::now());
        }
      }
      if (running == 0) break;
      if (daemon_ && !daemon_exit_reported) {
        if (std::optional<ExitStatus> st = daemon_->TryReap()) {
          daemon_exit_reported = true;
          Message(absl::StrCat("private kolod ", st->Describe(), " while ranks were running"));
        }
      }

      const Clock::time_point now = Clock::now();
      if (term_at.has_value() && !kill_at.has_value() && now >= *term_at) {
        Message(absl::StrCat("sending SIGTERM to ", running,
                             running == 1 ? " remaining rank" : " remaining ranks"));
        SignalRanks(SIGTERM);
        kill_at = now + ToClock(options_.kill_grace);
      } else if (kill_at.has_value() && now >= *kill_at) {
        Message(absl::StrCat("sending SIGKILL to ", running,
                             running == 1 ? " remaining rank" : " remaining ranks"));
        SignalRanks(SIGKILL);
        kill_at = Clock::time_point::max();  // Sent once.
      }

      Clock::duration wait = kMaxPollWait;
      if (term_at.has_value() && !kill_at.has_value()) {
        wait = std::min(wait, *term_at - now);
      } else if (kill_at.has_value() && *kill_at != Clock::time_point::max()) {
        wait = std::min(wait, *kill_at - now);
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
    return exit_code.value_or(0);
  }

  // Step 5.
  void StopDaemon() {
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

  const LaunchOptions& options_;
  std::vector<RankPlacement> placements_;  // Indexed by rank.
  bool spans_hosts_ = false;
  std::string coordinator_;  // KOLO_COORDINATOR; empty on one host.
  std::unique_ptr<SignalCatcher> signals_;
  OutputPump pump_;
  std::vector<int> pending_signals_;
  int interrupted_by_ = 0;  // The signal that stopped the start, if any.
  // Declared before the children so that it is removed after they are gone.
  std::unique_ptr<TempDir> daemon_dir_;
  std::unique_ptr<Subprocess> daemon_;
  std::vector<std::unique_ptr<Subprocess>> ranks_;
};

}  // namespace

absl::StatusOr<std::string> FindKolod(const KolodLocator& locator) {
  if (!locator.flag_path.empty()) {
    if (IsExecutableFile(locator.flag_path)) return locator.flag_path;
    return absl::NotFoundError(
        absl::StrCat("--kolod ", locator.flag_path, " is not an executable file"));
  }
  if (!locator.env_path.empty()) {
    if (IsExecutableFile(locator.env_path)) return locator.env_path;
    return absl::NotFoundError(
        absl::StrCat("KOLO_KOLOD=", locator.env_path, " is not an executable file"));
  }
  std::vector<std::string> tried;
  if (!locator.self_exe.empty()) {
    const std::filesystem::path dir = std::filesystem::path(locator.self_exe).parent_path();
    for (const std::filesystem::path& candidate :
         {dir / "kolod", (dir / "../../daemon/kolod").lexically_normal()}) {
      if (IsExecutableFile(candidate.string())) return candidate.string();
      tried.push_back(candidate.string());
    }
  }
  for (absl::string_view dir : absl::StrSplit(locator.path_env, ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/kolod");
    if (IsExecutableFile(candidate)) return candidate;
  }
  tried.push_back("kolod in PATH");
  return absl::NotFoundError(absl::StrCat("cannot find kolod (tried ", absl::StrJoin(tried, ", "),
                                          "); pass --kolod or set KOLO_KOLOD"));
}

absl::Status ValidateOptions(const LaunchOptions& options) {
  if (options.num_ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("-np must be at least 1, got ", options.num_ranks));
  }
  if (options.command.empty()) {
    return absl::InvalidArgumentError(
        "no command to run: usage is kolorun -np N [flags] -- CMD [ARGS...]");
  }
  if (options.socket_path.empty()) {
    return absl::InvalidArgumentError("the kolod socket path is empty");
  }
  if (options.grace < absl::ZeroDuration() || options.kill_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("grace periods must not be negative");
  }
  if (options.hosts.empty()) return absl::OkStatus();

  KOLO_ASSIGN_OR_RETURN(const std::vector<RankPlacement> placements,
                        AssignRanks(options.hosts, options.num_ranks, options.this_host));
  const bool spans_hosts = HostsUsed(placements) > 1;
  if (spans_hosts && options.private_daemon) {
    return absl::InvalidArgumentError(
        "--private_daemon cannot serve a job spanning hosts: the other hosts "
        "could not reach a private kolod (it listens on 127.0.0.1 only)");
  }
  if (options.peer_port < 1 || options.peer_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--peer_port must lie in [1, 65535], got ", options.peer_port));
  }
  if (!options.coordinator.empty()) {
    const size_t colon = options.coordinator.rfind(':');
    int port = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(absl::string_view(options.coordinator).substr(colon + 1), &port) ||
        port < 1 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--coordinator \"", options.coordinator, "\" is not HOST:PORT"));
    }
  }
  const bool any_remote = std::any_of(placements.begin(), placements.end(),
                                      [](const RankPlacement& p) { return !p.local; });
  if (any_remote) {
    if (const std::string why = RemoteCommandError(options.command); !why.empty()) {
      return absl::InvalidArgumentError(why);
    }
    if (options.ssh_program.empty()) {
      return absl::InvalidArgumentError("--ssh is empty");
    }
    if (options.remote_socket_path.empty()) {
      return absl::InvalidArgumentError("the kolod socket path for remote hosts is empty");
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> RankEnvironment(const std::vector<std::string>& base_env,
                                         const std::string& socket_path, const std::string& job_id,
                                         const std::string& job_token, int rank, int size) {
  return RankEnvironment(base_env, RankIdentity{.socket_path = socket_path,
                                                .job_id = job_id,
                                                .job_token = job_token,
                                                .coordinator = "",
                                                .rank = rank,
                                                .size = size,
                                                .local_rank = rank,
                                                .local_size = size});
}

std::vector<std::string> RankEnvironment(const std::vector<std::string>& base_env,
                                         const RankIdentity& id) {
  std::vector<std::string> env;
  env.reserve(base_env.size() + kRankVariables.size());
  for (const std::string& entry : base_env) {
    const std::string_view name = std::string_view(entry).substr(0, entry.find('='));
    const bool replaced = std::any_of(kRankVariables.begin(), kRankVariables.end(),
                                      [name](const char* var) { return name == var; });
    if (!replaced) env.push_back(entry);
  }
  env.push_back(absl::StrCat("KOLO_SOCKET=", id.socket_path));
  env.push_back(absl::StrCat("KOLO_JOB_ID=", id.job_id));
  env.push_back(absl::StrCat("KOLO_JOB_TOKEN=", id.job_token));
  env.push_back(absl::StrCat("KOLO_RANK=", id.rank));
  env.push_back(absl::StrCat("KOLO_SIZE=", id.size));
  env.push_back(absl::StrCat("KOLO_LOCAL_RANK=", id.local_rank));
  env.push_back(absl::StrCat("KOLO_LOCAL_SIZE=", id.local_size));
  if (!id.coordinator.empty()) {
    env.push_back(absl::StrCat("KOLO_COORDINATOR=", id.coordinator));
  }
  return env;
}

bool SocketAccepts(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) return false;
  path.copy(addr.sun_path, path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return false;
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
    return true;
  }
  // A full backlog still means that someone listens there.
  return errno == EAGAIN;
}

absl::StatusOr<int> RunJob(const LaunchOptions& options) {
  KOLO_RETURN_IF_ERROR(ValidateOptions(options));
  JobRunner runner(options);
  return runner.Run();
}

}  // namespace kolo::kolorun
