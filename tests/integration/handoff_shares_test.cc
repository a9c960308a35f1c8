// kolod's handoff socket shared between users: one user (mallory, uid
// 65534) who holds hundreds of idle handoff connections and reopens each one
// kolod closes gets no more than her uid's share of the connections in
// progress, and another user's job runs beside her the whole time.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/handoff.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_session.h"

namespace kolo::testing {
namespace {

constexpr uid_t kMallory = kOtherUser;
// How many handoff connections mallory keeps open (or tries to).
constexpr int kHeld = 200;
// The share of one uid this test gives kolod (--max_handoffs_per_uid; 16
// by default).
constexpr int kShare = 8;

// How many entries /proc/<pid>/<what> has (its descriptors, its threads).
int CountEntries(pid_t pid, const char* what) {
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/", what).c_str());
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

// A non-blocking connection to `addr`, or -1 (the backlog is full).
int Connect(const sockaddr_un& addr) {
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return -1;
  if (connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(s);
    return -1;
  }
  return s;
}

// Mallory, in a forked child: becomes uid 65534, opens kHeld idle handoff
// connections, says so on `report` and, until `stop` is readable, reopens
// each that kolod closes (or that the backlog refused). At the end she
// writes how many kolod closed on her. Raw system calls only.
[[noreturn]] void RunMallory(const std::string& handoff, int report, int stop) {
  if (setgid(kMallory) != 0 || setuid(kMallory) != 0) _exit(3);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, handoff.data(), handoff.size());
  int socks[kHeld];
  pollfd fds[kHeld + 1];
  for (int& s : socks) s = Connect(addr);
  if (write(report, "r", 1) != 1) _exit(4);
  long closed_on_her = 0;
  for (;;) {
    fds[0] = {stop, POLLIN, 0};
    for (int i = 0; i < kHeld; ++i) {
      if (socks[i] < 0) socks[i] = Connect(addr);
      fds[i + 1] = {socks[i], POLLIN, 0};  // a negative fd is ignored
    }
    if (poll(fds, kHeld + 1, 50) < 0 && errno != EINTR) _exit(5);
    if (fds[0].revents != 0) break;
    for (int i = 0; i < kHeld; ++i) {
      if (socks[i] < 0 || fds[i + 1].revents == 0) continue;
      close(socks[i]);
      socks[i] = Connect(addr);
      ++closed_on_her;
    }
  }
  if (write(report, &closed_on_her, sizeof(closed_on_her)) != sizeof(closed_on_her)) _exit(6);
  _exit(0);
}

TEST(HandoffSharesTest, OneUsersIdleConnectionsDoNotKeepAnothersJobOut) {
  if (!CanBecomeAnotherUser()) GTEST_SKIP() << "needs root to run a client as another user";
  const std::string dir = MakeTempDir();
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  auto daemon = DaemonProcess::Start(
      dir + "/kolod.sock", {"--socket_mode=0666", absl::StrCat("--max_handoffs_per_uid=", kShare)});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  // Idle, once it has served a job (gRPC's threads are started).
  ExpectDaemonServesAJob(*daemon, "warm-up");
  const int idle_fds = CountEntries(daemon->pid(), "fd");
  const int idle_threads = CountEntries(daemon->pid(), "task");

  int report[2], stop[2];
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(stop, O_CLOEXEC), 0);
  pid_t mallory = fork();
  ASSERT_GE(mallory, 0);
  if (mallory == 0) {
    close(report[0]);
    close(stop[1]);
    RunMallory(HandoffSocketPath(daemon->socket_path()), report[1], stop[0]);
  }
  close(report[1]);
  close(stop[0]);
  char ready = 0;
  ASSERT_EQ(read(report[0], &ready, 1), 1) << "mallory did not start";

  // kolod holds at most her share of her connections, two descriptors each
  // (the socket and her process's pidfd); the rest it closes at once, and
  // she reopens them.
  EXPECT_LE(CountEntries(daemon->pid(), "fd"), idle_fds + 2 * kShare + 4) << daemon->Log();
  // Alice's two-rank job, beside her, hands off (each rank) and succeeds.
  const absl::Time start = absl::Now();
  ExpectDaemonServesAJob(*daemon, "alice");
  std::cerr << "alice's job beside mallory's " << kHeld << " connections: " << absl::Now() - start
            << "\n";
  int status = 0;
  EXPECT_EQ(waitpid(mallory, &status, WNOHANG), 0) << "mallory stopped before alice's job ended";

  close(stop[1]);
  long closed_on_her = 0;
  EXPECT_EQ(read(report[0], &closed_on_her, sizeof(closed_on_her)),
            static_cast<ssize_t>(sizeof(closed_on_her)));
  close(report[0]);
  ASSERT_EQ(waitpid(mallory, &status, 0), mallory);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::cerr << "kolod closed " << closed_on_her << " of mallory's connections\n";
  EXPECT_GE(closed_on_her, kHeld - kShare);

  // Her connections go with her: kolod is back to about idle.
  int fds = 0, threads = 0;
  EXPECT_TRUE(WaitUntil(
      [&] {
        fds = CountEntries(daemon->pid(), "fd");
        threads = CountEntries(daemon->pid(), "task");
        return fds <= idle_fds + 4 && threads <= idle_threads + 4;
      },
      absl::Seconds(30), absl::Milliseconds(50)))
      << "kolod holds " << fds << " descriptors (" << idle_fds << " idle) and " << threads
      << " threads (" << idle_threads << " idle)";
  ASSERT_TRUE(daemon->Alive()) << daemon->Log();
}

}  // namespace
}  // namespace kolo::testing
