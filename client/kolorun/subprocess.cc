#include "client/kolorun/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/errno_status.h"

namespace kolo::kolorun {
namespace {

// The signals whose disposition a child must not inherit from kolorun:
// kolorun ignores SIGPIPE and catches the forwarded ones.
constexpr int kResetSignals[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD};

// posix_spawn's attribute and file-action objects, destroyed on every path.
class SpawnSetup {
 public:
  SpawnSetup() {
    posix_spawnattr_init(&attr_);
    posix_spawn_file_actions_init(&actions_);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions_);
    posix_spawnattr_destroy(&attr_);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;

  posix_spawnattr_t* attr() { return &attr_; }
  posix_spawn_file_actions_t* actions() { return &actions_; }

 private:
  posix_spawnattr_t attr_;
  posix_spawn_file_actions_t actions_;
};

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void UniqueFd::Reset() {
  // close() is not retried on EINTR: on Linux the descriptor is gone anyway.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::StatusOr<Pipe> MakePipe(bool nonblocking_read) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return ::kolo::ErrnoToStatus(errno, "pipe2");
  }
  Pipe pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
  if (nonblocking_read) {
    const int flags = ::fcntl(fds[0], F_GETFL);
    if (flags < 0 || ::fcntl(fds[0], F_SETFL, flags | O_NONBLOCK) != 0) {
      return ::kolo::ErrnoToStatus(errno, "fcntl(O_NONBLOCK) on a pipe");
    }
  }
  return pipe;
}

std::string SignalName(int signo) {
  const char* abbrev = ::sigabbrev_np(signo);
  if (abbrev == nullptr) return absl::StrCat("signal ", signo);
  return absl::StrCat("SIG", abbrev);
}

ExitStatus ExitStatus::FromWaitStatus(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    return ExitStatus{.signaled = true, .value = WTERMSIG(wait_status)};
  }
  return ExitStatus{.signaled = false, .value = WEXITSTATUS(wait_status)};
}

std::string ExitStatus::Describe() const {
  if (signaled) return absl::StrCat("killed by signal ", SignalName(value));
  return absl::StrCat("exited with status ", value);
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("no command to run");
  }
  absl::StatusOr<Pipe> out = MakePipe(/*nonblocking_read=*/true);
  if (!out.ok()) return out.status();
  absl::StatusOr<Pipe> err = MakePipe(/*nonblocking_read=*/true);
  if (!err.ok()) return err.status();

  SpawnSetup setup;
  sigset_t empty_mask;
  sigemptyset(&empty_mask);
  sigset_t reset;
  sigemptyset(&reset);
  for (int signo : kResetSignals) sigaddset(&reset, signo);
  posix_spawnattr_setflags(setup.attr(),
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(setup.attr(), 0);
  posix_spawnattr_setsigmask(setup.attr(), &empty_mask);
  posix_spawnattr_setsigdefault(setup.attr(), &reset);
  posix_spawn_file_actions_addopen(setup.actions(), STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(setup.actions(), out->write_end.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(setup.actions(), err->write_end.get(), STDERR_FILENO);

  std::vector<char*> argv = CStrings(options.argv);
  std::vector<char*> envp = CStrings(options.env);
  pid_t pid = -1;
  const int rc =
      ::posix_spawnp(&pid, argv[0], setup.actions(), setup.attr(), argv.data(), envp.data());
  if (rc != 0) {
    return ::kolo::ErrnoToStatus(
        rc, absl::StrCat("cannot run `", absl::StrJoin(options.argv, " "), "`"));
  }
  // A pidfd makes the child's exit pollable; older kernels lack it.
  // (pidfds are always close-on-exec.)
  UniqueFd exit_fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  // The write ends close here, in kolorun, so that the pipes report EOF
  // once the child (and whatever inherited them) has gone.
  return std::unique_ptr<Subprocess>(
      new Subprocess(pid, std::move(out->read_end), std::move(err->read_end), std::move(exit_fd)));
}

Subprocess::~Subprocess() {
  if (status_.has_value()) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);  // In case it left its group.
  int wait_status = 0;
  while (::waitpid(pid_, &wait_status, 0) < 0 && errno == EINTR) {
  }
}

void Subprocess::SignalGroup(int signo) {
  if (status_.has_value()) return;
  if (::kill(-pid_, signo) != 0) ::kill(pid_, signo);
}

std::optional<ExitStatus> Subprocess::TryReap() {
  if (status_.has_value()) return status_;
  int wait_status = 0;
  pid_t rc;
  do {
    rc = ::waitpid(pid_, &wait_status, WNOHANG);
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) return std::nullopt;
  if (rc < 0) {
    // ECHILD: someone else reaped it (SIGCHLD ignored); the status is lost.
    status_ = ExitStatus{.signaled = false, .value = 255};
  } else {
    status_ = ExitStatus::FromWaitStatus(wait_status);
  }
  exit_fd_.Reset();
  return status_;
}

}  // namespace kolo::kolorun
