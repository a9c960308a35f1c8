// CallerMemory: kolod's access to the memory of one attached client process,
// through cross-memory attach (process_vm_readv/writev), so a collective can
// read a rank's tensor where the framework put it and write the result back
// without two copies through the session's arena.
//
// The process is named by a pidfd the kernel gave for the handoff socket's
// peer (SO_PEERPIDFD), not by a pid a request could name: every access first
// checks that this very process is still alive, so a pid recycled after the
// rank exits can never point kolod at another process. (A pid is reused only
// after the pid space wraps, which cannot happen between that check and the
// transfer right after it.) Only the process's own memory is reached, at
// addresses it gave: a broken or hostile rank can fail its own collectives,
// nothing else. kolod uses it only for callers of its own uid, where the
// kernel's ptrace rule is the user's own: a caller that later runs a
// set-user-ID program loses the access (the kernel marks the process not
// dumpable). kolod does not use it at all when it holds CAP_SYS_PTRACE
// without being root, since that capability would bypass this rule for a
// process of its uid that gained another's. Where the kernel allows no access (kolod runs as
// another user without CAP_SYS_PTRACE, Yama, seccomp), the attach probe fails and the session keeps
// copying through the arena.
//
// Thread-safety: immutable after creation; Read and Write are safe from any
// thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace kolo::daemon {

class CallerMemory {
 public:
  // The process at the other end of a connected Unix socket, as the kernel
  // knows it; UNIMPLEMENTED where the kernel has no SO_PEERPIDFD (before
  // Linux 6.5).
  static absl::StatusOr<std::shared_ptr<const CallerMemory>> OfSocketPeer(int socket_fd);
  // The process a pidfd refers to; FAILED_PRECONDITION when it has exited.
  static absl::StatusOr<std::shared_ptr<const CallerMemory>> OfPidfd(UniqueFd pidfd);

  // OK when this daemon's privileges keep the rule above: a root daemon, or
  // one without CAP_SYS_PTRACE; FAILED_PRECONDITION with the reason if not.
  static absl::Status DaemonPrivilegesAllow();

  pid_t pid() const { return pid_; }
  // `bytes` bytes at `address` in the process into `to`; INVALID_ARGUMENT
  // when the range is not mapped readable there, UNAVAILABLE when the
  // process has exited, PERMISSION_DENIED when the kernel refuses.
  absl::Status Read(uint64_t address, void* to, uint64_t bytes) const;
  // `bytes` bytes from `from` to `address` in the process (errors as Read).
  absl::Status Write(uint64_t address, const void* from, uint64_t bytes) const;

 private:
  CallerMemory(UniqueFd pidfd, pid_t pid) : pidfd_(std::move(pidfd)), pid_(pid) {}
  absl::Status Transfer(bool write, uint64_t address, void* local, uint64_t bytes) const;

  const UniqueFd pidfd_;
  const pid_t pid_;
};

}  // namespace kolo::daemon
