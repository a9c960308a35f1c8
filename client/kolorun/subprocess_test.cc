#include "client/kolorun/subprocess.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::kolorun {
namespace {

using ::testing::HasSubstr;

// Reads `fd` (non-blocking) to EOF, waiting at most `timeout` in total.
std::string ReadToEof(int fd, std::chrono::milliseconds timeout) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    ::poll(&p, 1, 50);
    char buf[256];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) return out;
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  ADD_FAILURE() << "no EOF within the deadline";
  return out;
}

ExitStatus WaitForExit(Subprocess& p, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto st = p.TryReap()) return *st;
    pollfd pfd{.fd = p.exit_fd(), .events = POLLIN, .revents = 0};
    ::poll(&pfd, p.exit_fd() >= 0 ? 1 : 0, 20);
  }
  ADD_FAILURE() << "child did not exit within the deadline";
  return ExitStatus{.signaled = false, .value = -1};
}

TEST(SubprocessTest, CapturesOutputEnvironmentAndExitCode) {
  auto p = Subprocess::Spawn(
      {.argv = {"/bin/sh", "-c", "echo out $FOO; echo err >&2; exit 3"}, .env = {"FOO=bar"}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(ReadToEof((*p)->stdout_pipe().get(), std::chrono::seconds(10)), "out bar\n");
  EXPECT_EQ(ReadToEof((*p)->stderr_pipe().get(), std::chrono::seconds(10)), "err\n");
  const ExitStatus st = WaitForExit(**p, std::chrono::seconds(10));
  EXPECT_FALSE(st.success());
  EXPECT_EQ(st.ShellCode(), 3);
  EXPECT_EQ(st.Describe(), "exited with status 3");
  EXPECT_TRUE((*p)->reaped());
}

TEST(SubprocessTest, RunsInItsOwnProcessGroupWithNullStdin) {
  auto p = Subprocess::Spawn({.argv = {"/bin/sh", "-c", "cut -d' ' -f5 /proc/$$/stat; cat"},
                              .env = {"PATH=/bin:/usr/bin"}});
  ASSERT_TRUE(p.ok()) << p.status();
  // `cat` ends at once because stdin is /dev/null.
  const std::string out = ReadToEof((*p)->stdout_pipe().get(), std::chrono::seconds(10));
  EXPECT_EQ(out, std::to_string((*p)->pid()) + "\n");
  EXPECT_TRUE(WaitForExit(**p, std::chrono::seconds(10)).success());
}

TEST(SubprocessTest, SignalGroupReachesGrandchildren) {
  // The shell waits on a background sleep; both are in the group.
  auto p = Subprocess::Spawn({.argv = {"/bin/sh", "-c", "sleep 1000 & echo started; wait"},
                              .env = {"PATH=/bin:/usr/bin"}});
  ASSERT_TRUE(p.ok()) << p.status();
  char c;
  pollfd pfd{.fd = (*p)->stdout_pipe().get(), .events = POLLIN, .revents = 0};
  ASSERT_EQ(::poll(&pfd, 1, 10000), 1);
  ASSERT_EQ(::read(pfd.fd, &c, 1), 1);
  (*p)->SignalGroup(SIGTERM);
  const ExitStatus st = WaitForExit(**p, std::chrono::seconds(10));
  EXPECT_TRUE(st.signaled);
  EXPECT_EQ(st.value, SIGTERM);
  EXPECT_EQ(st.Describe(), "killed by signal SIGTERM");
  EXPECT_EQ(st.ShellCode(), 128 + SIGTERM);
  // The sleep got it too: nothing holds the pipe open any more.
  ReadToEof((*p)->stdout_pipe().get(), std::chrono::seconds(10));
}

TEST(SubprocessTest, MissingProgramIsASpawnError) {
  auto p = Subprocess::Spawn({.argv = {"/nonexistent/kolo-no-such-program"}});
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("/nonexistent/kolo-no-such-program"));
}

TEST(SubprocessTest, DestructorKillsAndReapsARunningChild) {
  pid_t pid;
  {
    auto p = Subprocess::Spawn({.argv = {"/bin/sleep", "1000"}});
    ASSERT_TRUE(p.ok()) << p.status();
    pid = (*p)->pid();
  }
  // Reaped by the destructor: no such child any more.
  EXPECT_EQ(::kill(pid, 0), -1);
}

TEST(SignalNameTest, NamesSignals) {
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalName(SIGINT), "SIGINT");
}

}  // namespace
}  // namespace kolo::kolorun
