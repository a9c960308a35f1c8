#include "daemon/core/caller_memory.h"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

TEST(CallerMemoryTest, TheSocketPeerIsNamedByTheKernel) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  auto m = CallerMemory::OfSocketPeer(a.get());
  if (absl::IsUnimplemented(m.status())) GTEST_SKIP() << m.status();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->pid(), getpid());
  std::vector<uint32_t> there = {1, 2, 3, 4}, here(4, 0);
  ASSERT_TRUE((*m)->Read(reinterpret_cast<uint64_t>(there.data()), here.data(), 16).ok());
  EXPECT_EQ(here, there);
  here = {9, 8, 7, 6};
  ASSERT_TRUE((*m)->Write(reinterpret_cast<uint64_t>(there.data()), here.data(), 16).ok());
  EXPECT_EQ(there, here);
  // An address that is not mapped fails that access only.
  absl::Status bad = (*m)->Read(16, here.data(), 16);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_EQ((*m)->Read(~uint64_t{0} - 4, here.data(), 16).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CallerMemoryTest, ReadsAndWritesAnotherProcessUntilItExits) {
  static uint64_t buffer[2] = {0x1111, 0};
  int go[2], done[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c;
    if (read(go[0], &c, 1) != 1) _exit(2);
    // The parent wrote into this process's copy of `buffer`.
    const int ok = buffer[1] == 0x2222 ? 0 : 1;
    if (write(done[1], "x", 1) != 1) _exit(3);
    _exit(ok);
  }
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, child, 0)));
  ASSERT_TRUE(pidfd.valid());
  auto m = CallerMemory::OfPidfd(std::move(pidfd));
  ASSERT_TRUE(m.ok()) << m.status();
  buffer[0] = 0;  // this process's copy only
  uint64_t seen = 0;
  ASSERT_TRUE((*m)->Read(reinterpret_cast<uint64_t>(&buffer[0]), &seen, 8).ok());
  EXPECT_EQ(seen, 0x1111u);
  const uint64_t value = 0x2222;
  ASSERT_TRUE((*m)->Write(reinterpret_cast<uint64_t>(&buffer[1]), &value, 8).ok());
  EXPECT_EQ(buffer[1], 0u);
  ASSERT_EQ(write(go[1], "x", 1), 1);
  char c;
  ASSERT_EQ(read(done[0], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // Gone (and reaped): nothing more is read, whoever gets the pid next.
  EXPECT_EQ((*m)->Read(reinterpret_cast<uint64_t>(&buffer[0]), &seen, 8).code(),
            absl::StatusCode::kUnavailable);
  for (int fd : {go[0], go[1], done[0], done[1]}) close(fd);
}

// Sets this process's effective capabilities to `effective` (permitted and
// inheritable sets unchanged).
bool SetEffectiveCapabilities(uint64_t effective) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  data[0].effective = static_cast<uint32_t>(effective);
  data[1].effective = static_cast<uint32_t>(effective >> 32);
  return syscall(SYS_capset, &header, data) == 0;
}

// A daemon that is not root but holds CAP_SYS_PTRACE could reach a process
// of its uid after it ran a set-user-ID program: it must not use caller
// memory. The same daemon without the capability may.
TEST(CallerMemoryTest, ANonRootDaemonWithThePtraceCapabilityMayNotUseIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become a non-root process with capabilities";
  EXPECT_TRUE(CallerMemory::DaemonPrivilegesAllow().ok());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (prctl(PR_SET_KEEPCAPS, 1) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(10);
    if (!SetEffectiveCapabilities(uint64_t{1} << CAP_SYS_PTRACE)) _exit(11);
    absl::Status with = CallerMemory::DaemonPrivilegesAllow();
    if (with.code() != absl::StatusCode::kFailedPrecondition) _exit(12);
    if (with.message().find("CAP_SYS_PTRACE") == absl::string_view::npos) _exit(13);
    if (!SetEffectiveCapabilities(0)) _exit(14);
    if (!CallerMemory::DaemonPrivilegesAllow().ok()) _exit(15);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 10) GTEST_SKIP() << "uid 65534 is not mapped in this namespace";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace kolo::daemon
