#include "tests/integration/harness.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/short_temp_dir.h"
#include "gtest/gtest.h"

extern char** environ;

namespace kolo::testing {
namespace {

bool CanConnect(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv,
                            const std::vector<std::string>& extra_env,
                            const std::string& log_path) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "KOLO_", 5) != 0) env.push_back(*e);
  }
  for (const auto& e : extra_env) env.push_back(e);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, cargv[0], &fa, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("spawn ", argv[0], ": ", std::strerror(rc)));
  }
  return pid;
}

int Decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

std::string MakeTempDir() {
  // Under /tmp, not TEST_TMPDIR: socket paths must stay under 108 bytes.
  return MakeShortTempDir("kolo-test");
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> PeerTlsFlags(const std::string& name, const std::string& cert_dir,
                                      const std::string& ca_dir) {
  return {"--peer_address=127.0.0.1:0", absl::StrCat("--peer_tls_ca=", ca_dir, "/ca.pem"),
          absl::StrCat("--peer_tls_cert=", cert_dir, "/", name, ".pem"),
          absl::StrCat("--peer_tls_key=", cert_dir, "/", name, ".key")};
}

absl::StatusOr<DaemonProcess> DaemonProcess::Start(const std::string& socket_path,
                                                   std::vector<std::string> extra_args) {
  // The Peer plane is off unless `extra_args` turn it on (a later flag wins).
  std::vector<std::string> argv = {kKolodPath, "--socket", socket_path,
                                   "--status_address=127.0.0.1:0", "--peer_address="};
  for (auto& a : extra_args) argv.push_back(std::move(a));
  auto pid = Spawn(argv, {}, socket_path + ".log");
  if (!pid.ok()) return pid.status();
  DaemonProcess d(*pid, socket_path);
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!CanConnect(socket_path)) {
    if (absl::Now() > deadline || !d.Alive()) {
      return absl::UnavailableError(
          absl::StrCat("kolod did not come up: ", ReadFile(socket_path + ".log")));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return d;
}

DaemonProcess::DaemonProcess(DaemonProcess&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      socket_(std::move(o.socket_)),
      exit_code_(std::exchange(o.exit_code_, std::nullopt)) {}

DaemonProcess::~DaemonProcess() {
  if (pid_ <= 0) return;
  // A kolod that fails as it stops (a sanitizer's report at exit, a hang
  // past the grace) fails the test that started it.
  const bool running = Alive();
  const int code = Kill(SIGTERM);
  if (running && code != 0) {
    ADD_FAILURE() << "kolod at " << socket_ << " exited with status " << code
                  << " when asked to stop (SIGTERM); its log:\n"
                  << Log();
  }
}

bool DaemonProcess::Alive() const {
  if (pid_ <= 0 || exit_code_.has_value()) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) exit_code_ = Decode(status);
  return r == 0;
}

std::string DaemonProcess::Log() const { return ReadFile(socket_ + ".log"); }

int DaemonProcess::Kill(int sig) {
  if (pid_ <= 0) return -1;
  if (!exit_code_.has_value()) {
    kill(pid_, sig);
    int status = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    for (;;) {
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ = Decode(status);
        break;
      }
      if (r < 0) {
        exit_code_ = -1;  // not our child any more: nothing to learn
        break;
      }
      if (absl::Now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        exit_code_ = Decode(status);
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  pid_ = -1;
  return *exit_code_;
}

absl::StatusOr<Ranks> Ranks::Start(const std::string& socket_path, const std::string& job_id, int n,
                                   const std::vector<std::string>& argv, const std::string& token) {
  return StartOnNode(socket_path, job_id, n, 0, n, "", argv, token);
}

absl::StatusOr<Ranks> Ranks::StartOnNode(const std::string& socket_path, const std::string& job_id,
                                         int size, int first_rank, int local_size,
                                         const std::string& coordinator,
                                         const std::vector<std::string>& argv,
                                         const std::string& token) {
  Ranks ranks;
  std::string dir = MakeTempDir();
  for (int l = 0; l < local_size; ++l) {
    const int r = first_rank + l;
    std::string log = absl::StrCat(dir, "/rank", r, ".log");
    std::vector<std::string> env = {absl::StrCat("KOLO_SOCKET=", socket_path),
                                    absl::StrCat("KOLO_JOB_ID=", job_id),
                                    absl::StrCat("KOLO_JOB_TOKEN=", token),
                                    absl::StrCat("KOLO_RANK=", r),
                                    absl::StrCat("KOLO_SIZE=", size),
                                    absl::StrCat("KOLO_LOCAL_RANK=", l),
                                    absl::StrCat("KOLO_LOCAL_SIZE=", local_size)};
    if (!coordinator.empty()) env.push_back(absl::StrCat("KOLO_COORDINATOR=", coordinator));
    auto pid = Spawn(argv, env, log);
    if (!pid.ok()) return pid.status();
    ranks.pids_.push_back(*pid);
    ranks.logs_.push_back(log);
    ranks.codes_.push_back(-1);
  }
  return ranks;
}

Ranks::~Ranks() {
  for (pid_t p : pids_) {
    if (p > 0) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
  }
}

std::vector<RankResult> Ranks::Wait(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  std::vector<RankResult> out(pids_.size());
  for (size_t r = 0; r < pids_.size(); ++r) {
    int status = 0;
    while (pids_[r] > 0) {
      pid_t got = waitpid(pids_[r], &status, WNOHANG);
      if (got == pids_[r]) {
        codes_[r] = Decode(status);
        pids_[r] = -1;
        break;
      }
      if (absl::Now() > deadline) {
        kill(pids_[r], SIGKILL);
        waitpid(pids_[r], &status, 0);
        codes_[r] = 128 + SIGKILL;
        pids_[r] = -1;
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    out[r].exit_code = codes_[r];
    out[r].output = ReadFile(logs_[r]);
  }
  return out;
}

bool Ranks::WaitForOutput(int rank, const std::string& text, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (ReadFile(logs_[rank]).find(text) != std::string::npos) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

bool CanBecomeAnotherUser() {
  if (geteuid() != 0) return false;
  pid_t child = fork();
  if (child == 0) _exit(setgid(kOtherUser) == 0 && setuid(kOtherUser) == 0 ? 0 : 1);
  int status = 0;
  return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

}  // namespace kolo::testing
