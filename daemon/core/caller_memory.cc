#include "daemon/core/caller_memory.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/errno_status.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5; older C library headers lack it
#endif

namespace kolo::daemon {
namespace {

// At most this much per system call: the kernel pins the pages of one call.
constexpr uint64_t kMaxPerCall = uint64_t{1} << 30;

// The value after "<key>:" in a /proc file of "Key: value" lines.
absl::StatusOr<std::string> ProcField(const std::string& file, absl::string_view key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view v = line;
    if (absl::ConsumePrefix(&v, key) && absl::ConsumePrefix(&v, ":")) {
      return std::string(absl::StripAsciiWhitespace(v));
    }
  }
  return absl::NotFoundError(absl::StrCat("no ", key, " line in ", file));
}

// The pid a pidfd refers to (-1 once the process has exited).
absl::StatusOr<pid_t> PidOf(int pidfd) {
  absl::StatusOr<std::string> v = ProcField(absl::StrCat("/proc/self/fdinfo/", pidfd), "Pid");
  int pid = 0;
  if (!v.ok() || !absl::SimpleAtoi(*v, &pid)) {
    return absl::FailedPreconditionError(absl::StrCat("descriptor ", pidfd, " is not a pidfd"));
  }
  return static_cast<pid_t>(pid);
}

// Whether this process's effective capabilities hold `bit` (CapEff is a
// hexadecimal mask).
absl::StatusOr<bool> HasEffectiveCapability(int bit) {
  absl::StatusOr<std::string> v = ProcField("/proc/self/status", "CapEff");
  uint64_t mask = 0;
  if (!v.ok() || !absl::SimpleHexAtoi(*v, &mask)) {
    return absl::InternalError("no readable CapEff line in /proc/self/status");
  }
  return ((mask >> bit) & 1) != 0;
}

constexpr int kCapSysPtrace = 19;

}  // namespace

absl::Status CallerMemory::DaemonPrivilegesAllow() {
  if (geteuid() == 0) return absl::OkStatus();
  absl::StatusOr<bool> ptrace = HasEffectiveCapability(kCapSysPtrace);
  if (!ptrace.ok()) return ptrace.status();
  if (*ptrace) {
    return absl::FailedPreconditionError(
        "kolod holds CAP_SYS_PTRACE without being root: it would reach processes of its uid that "
        "gained another's, so ranks' memory is not used (drop the capability)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const CallerMemory>> CallerMemory::OfSocketPeer(int socket_fd) {
  int fd = -1;
  socklen_t len = sizeof(fd);
  if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) != 0) {
    const int e = errno;
    if (e == ENOPROTOOPT || e == EINVAL) {
      return absl::UnimplementedError("this kernel names no socket peer by pidfd (SO_PEERPIDFD)");
    }
    return ErrnoToStatus(e, "SO_PEERPIDFD");
  }
  return OfPidfd(UniqueFd(fd));
}

absl::StatusOr<std::shared_ptr<const CallerMemory>> CallerMemory::OfPidfd(UniqueFd pidfd) {
  if (!pidfd.valid()) return absl::InvalidArgumentError("no pidfd");
  absl::StatusOr<pid_t> pid = PidOf(pidfd.get());
  if (!pid.ok()) return pid.status();
  if (*pid <= 0) return absl::FailedPreconditionError("the process has exited");
  return std::shared_ptr<const CallerMemory>(new CallerMemory(std::move(pidfd), *pid));
}

absl::Status CallerMemory::Read(uint64_t address, void* to, uint64_t bytes) const {
  return Transfer(false, address, to, bytes);
}

absl::Status CallerMemory::Write(uint64_t address, const void* from, uint64_t bytes) const {
  return Transfer(true, address, const_cast<void*>(from), bytes);
}

absl::Status CallerMemory::Transfer(bool write, uint64_t address, void* local,
                                    uint64_t bytes) const {
  if (bytes == 0) return absl::OkStatus();
  if (address + bytes < address) {
    return absl::InvalidArgumentError(
        absl::StrCat("range [", address, ", +", bytes, ") wraps around"));
  }
  uint64_t done = 0;
  while (done < bytes) {
    // A pidfd polls readable once its process has exited: then the pid may
    // name another process soon, and nothing more is read or written.
    pollfd p{pidfd_.get(), POLLIN, 0};
    if (poll(&p, 1, 0) != 0) {
      return absl::UnavailableError(absl::StrCat("process ", pid_, " has exited"));
    }
    const uint64_t n = std::min(bytes - done, kMaxPerCall);
    iovec here{static_cast<uint8_t*>(local) + done, n};
    iovec there{reinterpret_cast<void*>(address + done), n};
    const ssize_t moved = write ? process_vm_writev(pid_, &here, 1, &there, 1, 0)
                                : process_vm_readv(pid_, &here, 1, &there, 1, 0);
    if (moved < 0 && errno == EINTR) continue;
    if (moved <= 0) {
      const int e = moved < 0 ? errno : EFAULT;
      const std::string what = absl::StrCat(write ? "writing" : "reading", " [", address + done,
                                            ", +", n, ") in process ", pid_);
      if (e == EFAULT) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": not mapped ", write ? "writable" : "readable", " there"));
      }
      if (e == ESRCH) return absl::UnavailableError(absl::StrCat(what, ": the process is gone"));
      if (e == EPERM) return absl::PermissionDeniedError(absl::StrCat(what, ": not permitted"));
      return ErrnoToStatus(e, what);
    }
    done += static_cast<uint64_t>(moved);
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon
