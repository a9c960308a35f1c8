// Process plumbing for kolorun: owned file descriptors, exit statuses, and
// child processes that run in a process group of their own with their stdout
// and stderr on pipes.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kolo::kolorun {

// An owned file descriptor, closed on destruction.
// Thread-safety: a value owned by one thread at a time.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes the descriptor now (if any).
  void Reset();

 private:
  int fd_ = -1;
};

// Both ends of a new pipe, close-on-exec. With `nonblocking_read`, reads from
// the read end never block.
struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
};
absl::StatusOr<Pipe> MakePipe(bool nonblocking_read);

// "SIGTERM" for SIGTERM; "signal 77" for a number without a name.
std::string SignalName(int signo);

// How a child process ended.
struct ExitStatus {
  bool signaled = false;  // Killed by a signal rather than exiting.
  int value = 0;          // The exit code, or the signal number if `signaled`.

  static ExitStatus FromWaitStatus(int wait_status);
  bool success() const { return !signaled && value == 0; }
  // What a shell reports: the exit code, or 128 + the signal number.
  int ShellCode() const { return signaled ? 128 + value : value; }
  // "exited with status 3" or "killed by signal SIGKILL".
  std::string Describe() const;
};

struct SpawnOptions {
  // argv[0] is looked up in kolorun's own PATH when it contains no '/'.
  std::vector<std::string> argv;
  // The child's entire environment, as "NAME=value" entries.
  std::vector<std::string> env;
};

// A running child: in a new process group whose id is its pid, stdin
// /dev/null, stdout and stderr on pipes read by the owner, all signals
// unblocked and the signals kolorun handles reset to their defaults.
//
// Destroying a Subprocess that was not reaped kills its process group with
// SIGKILL and reaps the child, so no error path leaves a child running.
// Thread-safety: owned by one thread.
class Subprocess {
 public:
  // Starts the child. Failure to execute argv[0] (missing, not executable)
  // is reported here, with its errno, rather than as an exit status.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Spawn(const SpawnOptions& options);

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }

  // The non-blocking read ends of the child's stdout and stderr; the owner
  // may move them out.
  UniqueFd& stdout_pipe() { return stdout_; }
  UniqueFd& stderr_pipe() { return stderr_; }

  // A descriptor that polls readable once the child has exited, or -1 where
  // the kernel has no pidfd (the owner then has to poll TryReap on a timer).
  int exit_fd() const { return exit_fd_.get(); }

  // Sends `signo` to the child's process group, which reaches whatever the
  // child started that stayed in it. Does nothing once the child is reaped:
  // its id may by then belong to someone else.
  void SignalGroup(int signo);

  // The child's exit status if it has exited (reaping it), else nullopt;
  // never blocks. Once it has returned a status it keeps returning it.
  std::optional<ExitStatus> TryReap();

  bool reaped() const { return status_.has_value(); }

 private:
  Subprocess(pid_t pid, UniqueFd out, UniqueFd err, UniqueFd exit_fd)
      : pid_(pid), stdout_(std::move(out)), stderr_(std::move(err)), exit_fd_(std::move(exit_fd)) {}

  const pid_t pid_;
  UniqueFd stdout_;
  UniqueFd stderr_;
  UniqueFd exit_fd_;
  std::optional<ExitStatus> status_;
};

}  // namespace kolo::kolorun
