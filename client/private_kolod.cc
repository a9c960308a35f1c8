#include "client/private_kolod.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/kolod_locator.h"
#include "common/errno_status.h"
#include "common/unique_fd.h"

extern char** environ;

namespace kolo {
namespace {

// FNV-1a: the same on every rank and every build.
uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// The user's private directory, created when missing.
absl::StatusOr<std::string> PrivateDir() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  const std::string dir = runtime != nullptr && *runtime == '/'
                              ? absl::StrCat(runtime, "/kolo")
                              : absl::StrCat("/tmp/kolo-", getuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoToStatus(errno, absl::StrCat("creating ", dir));
  }
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return ErrnoToStatus(errno, absl::StrCat("stat ", dir));
  if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        dir, " must be a directory of this user that nobody else may enter (mode 0700)"));
  }
  return dir;
}

// kolod beside the shared object holding libkolo (python/kolo/_core.so, or
// bazel-bin's layout), else KOLO_KOLOD or PATH.
absl::StatusOr<std::string> Kolod() {
  Dl_info info{};
  std::string self;
  if (dladdr(reinterpret_cast<void*>(&Fnv1a), &info) != 0 && info.dli_fname != nullptr) {
    self = info.dli_fname;
  }
  const char* env = std::getenv("KOLO_KOLOD");
  const char* path = std::getenv("PATH");
  return FindKolod({.env_path = env ? env : "", .self_exe = self, .path_env = path ? path : ""});
}

// Starts `argv` detached (its own session, reparented away from this
// process so that it is never left a zombie here), output to `log`.
absl::Status SpawnDetached(const std::vector<std::string>& argv, const std::string& log) {
  UniqueFd out(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!out.valid()) return ErrnoToStatus(errno, absl::StrCat("opening ", log));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t child = ::fork();
  if (child < 0) return ErrnoToStatus(errno, "fork");
  if (child == 0) {
    // Only async-signal-safe calls from here on.
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(out.get(), STDOUT_FILENO);
    ::dup2(out.get(), STDERR_FILENO);
    ::execve(args[0], args.data(), environ);
    ::_exit(127);
  }
  if (null_fd >= 0) ::close(null_fd);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return absl::OkStatus();
}

}  // namespace

std::string PrivateKolodSocket(const std::string& dir, const std::string& job_id) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(Fnv1a(job_id)));
  return absl::StrCat(dir, "/", hex, ".sock");
}

absl::StatusOr<std::string> UsePrivateKolod(const PrivateKolodRequest& request) {
  absl::StatusOr<std::string> dir = PrivateDir();
  if (!dir.ok()) return dir.status();
  const std::string socket = PrivateKolodSocket(*dir, request.job_id);
  if (socket.size() >= sizeof(sockaddr_un::sun_path) - sizeof(".handoff")) {
    return absl::InvalidArgumentError(
        absl::StrCat("the private kolod's socket ", socket, " is too long for a Unix socket"));
  }
  const std::string log = socket + ".log";
  std::string started;
  if (request.local_rank == 0 && !SocketAccepts(socket)) {
    absl::StatusOr<std::string> kolod = Kolod();
    if (!kolod.ok()) return kolod.status();
    std::vector<std::string> argv = PrivateKolodArgv(*kolod, socket);
    argv.push_back(absl::StrCat("--exit_when_idle_s=", request.exit_when_idle_s));
    if (absl::Status s = SpawnDetached(argv, log); !s.ok()) return s;
    started = absl::StrCat(" (started ", *kolod, "; its log: ", log, ")");
  }
  const absl::Time deadline = absl::Now() + request.start_timeout;
  while (!SocketAccepts(socket)) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no kolod on the node's socket, and the job's private kolod did not accept "
          "connections on ",
          socket, " within ", absl::FormatDuration(request.start_timeout),
          started.empty() ? " (local rank 0 starts it; its log: " + log + ")" : started));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return socket;
}

}  // namespace kolo
