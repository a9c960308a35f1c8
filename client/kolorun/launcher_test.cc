#include "client/kolorun/launcher.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/kolorun/launcher_test_fixtures.h"
#include "client/kolorun/remote_shell.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::kolorun {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;

TEST_F(LauncherTest, EveryRankGetsItsEnvironment) {
  LaunchOptions o =
      Options(3,
              "echo $KOLO_RANK $KOLO_SIZE $KOLO_LOCAL_RANK $KOLO_LOCAL_SIZE "
              "$KOLO_JOB_ID $KOLO_SOCKET ${#KOLO_JOB_TOKEN} $FOO $KOLO_STALL_WARNING_S");
  o.job_id = "job-42";
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  const std::string tail = absl::StrCat(" job-42 ", daemon_.path(), " 32 bar 7");
  EXPECT_THAT(out_.Lines(), UnorderedElementsAre(absl::StrCat("[0] 0 3 0 3", tail),
                                                 absl::StrCat("[1] 1 3 1 3", tail),
                                                 absl::StrCat("[2] 2 3 2 3", tail)));
  EXPECT_EQ(err_.Contents(), "");
}

TEST_F(LauncherTest, RanksShareOneFreshJobIdAndToken) {
  LaunchOptions o = Options(2, "echo $KOLO_JOB_ID $KOLO_JOB_TOKEN");
  ASSERT_TRUE(RunJob(o).ok());
  std::vector<std::string> lines = out_.Lines();
  ASSERT_EQ(lines.size(), 2u);
  const std::string a = lines[0].substr(4);
  const std::string b = lines[1].substr(4);
  EXPECT_EQ(a, b);
  EXPECT_THAT(a, StartsWith("job-"));
  const std::vector<std::string> parts = absl::StrSplit(a, ' ');
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(parts[1].size(), 32u);

  CapturedOutput out2;
  o.stdout_fd = out2.fd();
  ASSERT_TRUE(RunJob(o).ok());
  EXPECT_NE(out2.Lines().at(0).substr(4), a);
}

TEST_F(LauncherTest, PrefixesStdoutAndStderrLinesPerRank) {
  LaunchOptions o =
      Options(2, "printf 'one\\ntwo\\nno-newline'; printf 'err %s\\n' $KOLO_RANK >&2");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_THAT(out_.Lines(), UnorderedElementsAre("[0] one", "[0] two", "[0] no-newline", "[1] one",
                                                 "[1] two", "[1] no-newline"));
  EXPECT_THAT(err_.Lines(), UnorderedElementsAre("[0] err 0", "[1] err 1"));
}

TEST_F(LauncherTest, ManyLinesArriveWholeAndInOrderPerRank) {
  LaunchOptions o = Options(2, "i=0; while [ $i -lt 5000 ]; do echo line-$i; i=$((i+1)); done");
  ASSERT_TRUE(RunJob(o).ok());
  std::vector<int> next(2, 0);
  for (const std::string& line : out_.Lines()) {
    ASSERT_THAT(line, AnyOf(StartsWith("[0] line-"), StartsWith("[1] line-")));
    const int rank = line[1] - '0';
    EXPECT_EQ(line.substr(4), absl::StrCat("line-", next[rank]));
    ++next[rank];
  }
  EXPECT_EQ(next[0], 5000);
  EXPECT_EQ(next[1], 5000);
}

TEST_F(LauncherTest, FailingRankSetsExitCodeAndIsReported) {
  LaunchOptions o = Options(2, "if [ $KOLO_RANK = 1 ]; then echo bye; exit 3; fi; echo fine");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 3);
  EXPECT_THAT(err_.Contents(), HasSubstr("kolorun: rank 1 exited with status 3\n"));
  EXPECT_THAT(err_.Contents(), Not(HasSubstr("rank 0")));
  EXPECT_THAT(out_.Lines(), UnorderedElementsAre("[0] fine", "[1] bye"));
}

TEST_F(LauncherTest, RankKilledBySignalGives128PlusSignal) {
  LaunchOptions o = Options(1, "kill -SEGV $$");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 128 + SIGSEGV);
  EXPECT_THAT(err_.Contents(), HasSubstr("kolorun: rank 0 killed by signal SIGSEGV\n"));
}

TEST_F(LauncherTest, HangingRankIsTerminatedAfterGrace) {
  LaunchOptions o = Options(2, "if [ $KOLO_RANK = 0 ]; then exit 5; fi; exec sleep 1000");
  o.grace = absl::Milliseconds(200);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 5);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("kolorun: rank 0 exited with status 5\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: sending SIGTERM to 1 remaining rank\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: rank 1 killed by signal SIGTERM\n"));
  EXPECT_THAT(err, Not(HasSubstr("SIGKILL")));
}

TEST_F(LauncherTest, RankIgnoringSigtermIsKilled) {
  // Rank 1 ignores SIGTERM (its sleep inherits that); rank 0 fails only once
  // rank 1 is in that state.
  LaunchOptions o = Options(2,
                            "if [ $KOLO_RANK = 0 ]; then "
                            "  while [ ! -e $DIR/ready ]; do sleep 0.01; done; exit 6; "
                            "fi; trap '' TERM; touch $DIR/ready; exec sleep 1000");
  o.grace = absl::Milliseconds(100);
  o.kill_grace = absl::Milliseconds(200);
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 6);
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("sending SIGTERM to 1 remaining rank"));
  EXPECT_THAT(err, HasSubstr("sending SIGKILL to 1 remaining rank"));
  EXPECT_THAT(err, HasSubstr("kolorun: rank 1 killed by signal SIGKILL\n"));
}

TEST_F(LauncherTest, RanksThatFinishWithinGraceKeepTheirStatus) {
  LaunchOptions o = Options(2, "if [ $KOLO_RANK = 0 ]; then exit 9; fi; sleep 0.2; exit 0");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 9);
  EXPECT_THAT(err_.Contents(), Not(HasSubstr("SIGTERM")));
  EXPECT_THAT(err_.Contents(), Not(HasSubstr("rank 1")));
}

TEST_F(LauncherTest, ForwardsSignalsToEveryRankGroup) {
  // Each rank traps SIGTERM and waits on a background sleep (in its group);
  // once both are ready rank 0 sends SIGTERM to the launcher (its parent).
  LaunchOptions o = Options(2,
                            "trap 'echo got TERM; exit 7' TERM; touch $DIR/ready.$KOLO_RANK; "
                            "if [ $KOLO_RANK = 0 ]; then "
                            "  while [ ! -e $DIR/ready.1 ]; do sleep 0.01; done; kill -TERM $PPID; "
                            "fi; sleep 1000 & wait");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 7);
  EXPECT_THAT(out_.Lines(), UnorderedElementsAre("[0] got TERM", "[1] got TERM"));
  EXPECT_THAT(err_.Contents(),
              HasSubstr("kolorun: received SIGTERM; forwarding it to the ranks\n"));
}

TEST_F(LauncherTest, OutputHeldOpenByAGrandchildDoesNotHang) {
  LaunchOptions o = Options(1, "sleep 1000 & echo started");
  o.output_drain_timeout = absl::Milliseconds(200);
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_THAT(out_.Lines(), UnorderedElementsAre("[0] started"));
}

TEST_F(LauncherTest, CommandThatCannotRunIsAnError) {
  LaunchOptions o = Options(2, "");
  o.command = {"/nonexistent/kolo-no-such-program"};
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_FALSE(code.ok());
  EXPECT_THAT(std::string(code.status().message()),
              AllOf(HasSubstr("starting rank 0"), HasSubstr("/nonexistent/kolo-no-such-program")));
}

TEST_F(LauncherTest, InvalidOptionsAreRejected) {
  LaunchOptions o = Options(0, "true");
  EXPECT_EQ(RunJob(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options(1, "true");
  o.command.clear();
  EXPECT_THAT(std::string(RunJob(o).status().message()), HasSubstr("no command"));
}

// The private daemon -------------------------------------------------------

TEST_F(LauncherTest, StartsPrivateDaemonWhenForced) {
  const std::string record = dir_.path() + "/record";
  LaunchOptions o = Options(2, "test -S \"$KOLO_SOCKET\" && echo $KOLO_SOCKET");
  o.private_daemon = true;
  o.kolod_args = {"--record=" + record, "--extra"};
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << err_.Contents();

  const std::vector<std::string> lines = out_.Lines();
  ASSERT_EQ(lines.size(), 2u) << out_.Contents() << err_.Contents();
  const std::string socket = lines[0].substr(4);
  EXPECT_EQ(lines[1].substr(4), socket);
  EXPECT_NE(socket, daemon_.path());
  EXPECT_THAT(socket, HasSubstr("/kolorun."));
  // The daemon got --socket and the extra arguments, and was stopped with
  // SIGTERM; its directory is gone.
  EXPECT_EQ(ReadFile(record),
            absl::StrCat("--socket ", socket,
                         " --status_address=127.0.0.1:0 --peer_address= --record=", record,
                         " --extra\nSIGTERM\n"));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(socket).parent_path()));
  // Its output, including a last line without newline, is on stderr.
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("[kolod] fake kolod listening on " + socket + "\n"));
  EXPECT_THAT(err, HasSubstr("[kolod] fake kolod no newline at exit\n"));
  EXPECT_THAT(err, Not(HasSubstr("no kolod accepts")));
}

TEST_F(LauncherTest, StartsPrivateDaemonWhenNothingAnswers) {
  LaunchOptions o = Options(1, "echo $KOLO_SOCKET");
  o.socket_path = dir_.path() + "/nobody-here.sock";
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_THAT(err_.Contents(),
              HasSubstr(absl::StrCat("kolorun: no kolod accepts connections on ", o.socket_path,
                                     "; starting a private one\n")));
  ASSERT_EQ(out_.Lines().size(), 1u);
  EXPECT_THAT(out_.Lines()[0],
              AllOf(StartsWith("[0] "), HasSubstr("/kolorun."), Not(HasSubstr("nobody-here"))));
}

TEST_F(LauncherTest, UsesTheRunningDaemonWithoutLookingForKolod) {
  LaunchOptions o = Options(1, "echo $KOLO_SOCKET");
  o.kolod.flag_path = "/nonexistent/kolod";
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_THAT(out_.Lines(), UnorderedElementsAre("[0] " + daemon_.path()));
}

TEST_F(LauncherTest, DaemonThatExitsAtStartIsAnError) {
  LaunchOptions o = Options(1, "echo should-not-run");
  o.private_daemon = true;
  o.kolod_args = {"--exit_now=4"};
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_FALSE(code.ok());
  EXPECT_EQ(code.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(code.status().message()),
              HasSubstr("exited with status 4 before accepting connections"));
  EXPECT_THAT(err_.Contents(), HasSubstr("[kolod] fake kolod: exiting as asked\n"));
  EXPECT_EQ(out_.Contents(), "");
}

TEST_F(LauncherTest, DaemonThatNeverListensTimesOutAndIsStopped) {
  const std::string record = dir_.path() + "/record";
  LaunchOptions o = Options(1, "echo should-not-run");
  o.private_daemon = true;
  o.kolod_args = {"--never_listen", "--record=" + record};
  o.daemon_start_timeout = absl::Milliseconds(300);
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_FALSE(code.ok());
  EXPECT_EQ(code.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(ReadFile(record), HasSubstr("\nSIGTERM\n"));
  EXPECT_EQ(out_.Contents(), "");
}

TEST_F(LauncherTest, DaemonIgnoringSigtermIsKilled) {
  LaunchOptions o = Options(1, "true");
  o.private_daemon = true;
  o.kolod_args = {"--ignore_term"};
  o.daemon_stop_grace = absl::Milliseconds(200);
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_THAT(err_.Contents(),
              HasSubstr("private kolod did not stop after SIGTERM; sending SIGKILL"));
}

TEST_F(LauncherTest, MissingKolodIsAnError) {
  LaunchOptions o = Options(1, "true");
  o.private_daemon = true;
  o.kolod = KolodLocator{.self_exe = dir_.path() + "/kolorun", .path_env = dir_.path()};
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_FALSE(code.ok());
  EXPECT_EQ(code.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(code.status().message()), HasSubstr("--kolod"));
}

// Jobs spanning hosts, with a fake ssh ------------------------------------

TEST_F(MultiHostTest, LocalAndRemoteRanksRunWithTheirEnvironment) {
  // The script itself needs quoting: quotes, $, a backslash, two spaces.
  const std::string script =
      "printf '%s %s\\n' \"$KOLO_RANK $KOLO_SIZE $KOLO_LOCAL_RANK "
      "$KOLO_LOCAL_SIZE $KOLO_COORDINATOR [$KOLO_SOCKET] $KOLO_JOB_ID "
      "${FOO:-unset} ${KOLO_STALL_WARNING_S:-none}\" 'it'\\''s  \\ $HOME'; "
      "echo token $KOLO_JOB_TOKEN >&2";
  LaunchOptions o = HostOptions(3, {{"localhost", 1}, {"fakehost", 2}}, script);
  o.job_id = "job-7";
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << err_.Contents();

  const std::string quoted = " it's  \\ $HOME";
  EXPECT_THAT(
      out_.Lines(),
      UnorderedElementsAre(absl::StrCat("[0] 0 3 0 1 kolo-test-node:7371 [", daemon_.path(),
                                        "] job-7 bar 7", quoted),
                           // Remote ranks see only KOLO_* variables, passed on the command line.
                           absl::StrCat("[1] 1 3 0 2 kolo-test-node:7371 [/run/kolo/remote "
                                        "test.sock] job-7 unset 7",
                                        quoted),
                           absl::StrCat("[2] 2 3 1 2 kolo-test-node:7371 [/run/kolo/remote "
                                        "test.sock] job-7 unset 7",
                                        quoted)));
  // One token for every rank.
  const std::vector<std::string> err = err_.Lines();
  ASSERT_EQ(err.size(), 3u) << err_.Contents();
  const std::string token = err[0].substr(4);
  EXPECT_THAT(token, StartsWith("token "));
  for (const std::string& line : err) EXPECT_EQ(line.substr(4), token);

  // One ssh per remote rank, each with the whole command quoted.
  const std::vector<std::vector<std::string>> calls = SshCalls();
  ASSERT_EQ(calls.size(), 2u);
  std::vector<std::string> ranks;
  for (const std::vector<std::string>& argv : calls) {
    ASSERT_GE(argv.size(), 10u);
    EXPECT_THAT(
        std::vector<std::string>(argv.begin(), argv.begin() + 7),
        ::testing::ElementsAre("-o", "BatchMode=yes", "-p", "2222", "fakehost", "exec", "env"));
    EXPECT_THAT(std::vector<std::string>(argv.end() - 3, argv.end()),
                ::testing::ElementsAre("/bin/sh", "-c", ShellQuote(script)));
    EXPECT_THAT(argv, Contains("'KOLO_SOCKET=/run/kolo/remote test.sock'"));
    EXPECT_THAT(argv, Contains("KOLO_COORDINATOR=kolo-test-node:7371"));
    EXPECT_THAT(argv, Contains("KOLO_STALL_WARNING_S=7"));
    EXPECT_THAT(argv, Not(Contains(HasSubstr("FOO="))));
    for (const std::string& word : argv) {
      if (absl::StartsWith(word, "KOLO_RANK=")) ranks.push_back(word);
    }
  }
  EXPECT_THAT(ranks, UnorderedElementsAre("KOLO_RANK=1", "KOLO_RANK=2"));
}

TEST_F(MultiHostTest, FailingRemoteRankFailsTheJob) {
  LaunchOptions o =
      HostOptions(2, {{kThisHost, 1}, {"fakehost", 1}},
                  "if [ $KOLO_RANK = 1 ]; then echo bye; exit 3; fi; exec sleep 1000");
  o.grace = absl::Milliseconds(200);
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 3);
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("kolorun: rank 1 on fakehost exited with status 3\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: sending SIGTERM to 1 remaining rank\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: rank 0 on kolo-test-node killed by "
                             "signal SIGTERM\n"));
  EXPECT_THAT(out_.Lines(), Contains("[1] bye"));
}

TEST_F(MultiHostTest, RemoteRankIsStoppedThroughItsSsh) {
  LaunchOptions o = HostOptions(2, {{"localhost", 1}, {"fakehost", 1}},
                                "if [ $KOLO_RANK = 0 ]; then exit 4; fi; exec sleep 1000");
  o.grace = absl::Milliseconds(100);
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 4);
  EXPECT_THAT(err_.Contents(), HasSubstr("kolorun: rank 1 on fakehost killed by signal SIGTERM\n"));
}

TEST_F(MultiHostTest, UnreachableHostIsNamed) {
  LaunchOptions o = HostOptions(2, {{"localhost", 1}, {"fakehost", 1}}, "exit 0");
  o.base_env.push_back("FAKE_SSH_FAIL_HOST=fakehost");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 255);
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("[1] ssh: connect to host fakehost"));
  EXPECT_THAT(err, HasSubstr("kolorun: rank 1 on fakehost exited with status "
                             "255 (also ssh's own failure status"));
}

TEST_F(MultiHostTest, SshThatCannotRunIsAnError) {
  LaunchOptions o = HostOptions(2, {{"localhost", 1}, {"fakehost", 1}}, "true");
  o.ssh_program = "/nonexistent/ssh";
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_FALSE(code.ok());
  EXPECT_THAT(std::string(code.status().message()),
              HasSubstr("starting rank 1 on fakehost (over ssh)"));
}

TEST_F(MultiHostTest, NoLocalDaemonIsAnErrorNotAPrivateOne) {
  LaunchOptions o = HostOptions(2, {{"localhost", 1}, {"fakehost", 1}}, "echo should-not-run");
  o.socket_path = dir_.path() + "/nobody-here.sock";
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_FALSE(code.ok());
  EXPECT_EQ(code.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(code.status().message()),
              AllOf(HasSubstr("no kolod accepts connections on " + o.socket_path),
                    HasSubstr("needs the system kolod running on every host")));
  EXPECT_TRUE(SshCalls().empty());
  EXPECT_EQ(out_.Contents(), "");
}

TEST_F(MultiHostTest, RemoteOnlyJobNeedsNoLocalDaemon) {
  LaunchOptions o =
      HostOptions(2, {{"fakehost", 1}, {"otherhost", 1}},
                  "echo $KOLO_RANK $KOLO_LOCAL_RANK $KOLO_LOCAL_SIZE $KOLO_COORDINATOR");
  o.socket_path = dir_.path() + "/nobody-here.sock";
  o.kolod.flag_path = "/nonexistent/kolod";
  o.coordinator = "10.1.2.3:9999";
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << err_.Contents();
  EXPECT_THAT(out_.Lines(),
              UnorderedElementsAre("[0] 0 0 1 10.1.2.3:9999", "[1] 1 0 1 10.1.2.3:9999"));
}

TEST_F(MultiHostTest, OneLocalHostIsAnOrdinaryJob) {
  // Every rank on this machine: a private kolod is fine and no coordinator is
  // needed.
  LaunchOptions o = HostOptions(2, {{"localhost", 4}, {"fakehost", 2}},
                                "echo $KOLO_LOCAL_SIZE ${KOLO_COORDINATOR:-none}");
  o.private_daemon = true;
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << err_.Contents();
  EXPECT_THAT(out_.Lines(), UnorderedElementsAre("[0] 2 none", "[1] 2 none"));
  EXPECT_TRUE(SshCalls().empty());
}

TEST_F(MultiHostTest, InvalidHostOptionsAreRejected) {
  LaunchOptions o = HostOptions(4, {{"localhost", 1}, {"fakehost", 2}}, "true");
  EXPECT_THAT(std::string(ValidateOptions(o).message()),
              HasSubstr("-np 4 is more than the 3 slots"));
  o = HostOptions(2, {{"localhost", 1}, {"fakehost", 2}}, "true");
  o.private_daemon = true;
  EXPECT_THAT(std::string(ValidateOptions(o).message()),
              HasSubstr("--private_daemon cannot serve a job spanning hosts"));
  o = HostOptions(2, {{"localhost", 1}, {"fakehost", 2}}, "true");
  o.coordinator = "nohostport";
  EXPECT_THAT(std::string(ValidateOptions(o).message()), HasSubstr("is not HOST:PORT"));
  o = HostOptions(2, {{"localhost", 1}, {"fakehost", 2}}, "true");
  o.peer_port = 70000;
  EXPECT_THAT(std::string(ValidateOptions(o).message()), HasSubstr("--peer_port"));
  o = HostOptions(2, {{"localhost", 1}, {"fakehost", 2}}, "true");
  o.command = {"./a=b"};
  EXPECT_THAT(std::string(ValidateOptions(o).message()), HasSubstr("'='"));
  EXPECT_EQ(RunJob(o).status().code(), absl::StatusCode::kInvalidArgument);
}
// Pure helpers ---------------------------------------------------------------

class FindKolodTest : public ::testing::Test {
 protected:
  std::string MakeFile(const std::string& relative, bool executable) {
    const std::filesystem::path path = std::filesystem::path(dir_.path()) / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << "#!/bin/sh\n";
    ::chmod(path.c_str(), executable ? 0755 : 0644);
    return path.string();
  }
  ShortTempDir dir_;
};

TEST_F(FindKolodTest, ExplicitFlagWinsAndMustBeExecutable) {
  const std::string flag = MakeFile("a/kolod", true);
  const std::string env = MakeFile("b/kolod", true);
  EXPECT_EQ(*FindKolod({.flag_path = flag, .env_path = env}), flag);
  const std::string not_exec = MakeFile("c/kolod", false);
  auto found = FindKolod({.flag_path = not_exec, .env_path = env});
  ASSERT_FALSE(found.ok());
  EXPECT_THAT(std::string(found.status().message()), HasSubstr(not_exec));
}

TEST_F(FindKolodTest, EnvironmentBeforeNeighbours) {
  const std::string env = MakeFile("b/kolod", true);
  MakeFile("bin/kolod", true);
  EXPECT_EQ(*FindKolod({.env_path = env, .self_exe = dir_.path() + "/bin/kolorun"}), env);
  EXPECT_FALSE(FindKolod({.env_path = dir_.path() + "/missing"}).ok());
}

TEST_F(FindKolodTest, BesideKolorunThenBazelLayoutThenPath) {
  const std::string self = dir_.path() + "/bin/client/kolorun/kolorun";
  const std::string in_path = MakeFile("path/kolod", true);
  const KolodLocator locator{.self_exe = self, .path_env = "/nonexistent:" + dir_.path() + "/path"};
  EXPECT_EQ(*FindKolod(locator), in_path);
  const std::string bazel = MakeFile("bin/daemon/kolod", true);
  EXPECT_EQ(*FindKolod(locator), bazel);
  const std::string beside = MakeFile("bin/client/kolorun/kolod", true);
  EXPECT_EQ(*FindKolod(locator), beside);
}

TEST(RankEnvironmentTest, ReplacesRankVariablesAndKeepsTheRest) {
  const std::vector<std::string> env =
      RankEnvironment({"A=1", "KOLO_RANK=9", "KOLO_SOCKET=/old", "KOLO_OTHER=x", "KOLO_RANKS=y"},
                      "/s", "j", "t", 2, 4);
  EXPECT_THAT(env, UnorderedElementsAre("A=1", "KOLO_OTHER=x", "KOLO_RANKS=y", "KOLO_SOCKET=/s",
                                        "KOLO_JOB_ID=j", "KOLO_JOB_TOKEN=t", "KOLO_RANK=2",
                                        "KOLO_SIZE=4", "KOLO_LOCAL_RANK=2", "KOLO_LOCAL_SIZE=4"));
}

TEST(RankEnvironmentTest, LocalValuesAndCoordinatorOfAJobSpanningHosts) {
  const std::vector<std::string> env =
      RankEnvironment({"A=1", "KOLO_COORDINATOR=stale:1", "KOLO_LOCAL_SIZE=9"},
                      RankIdentity{.socket_path = "/s",
                                   .job_id = "j",
                                   .job_token = "t",
                                   .coordinator = "hostA:7371",
                                   .rank = 3,
                                   .size = 4,
                                   .local_rank = 1,
                                   .local_size = 2});
  EXPECT_THAT(env,
              UnorderedElementsAre("A=1", "KOLO_SOCKET=/s", "KOLO_JOB_ID=j", "KOLO_JOB_TOKEN=t",
                                   "KOLO_RANK=3", "KOLO_SIZE=4", "KOLO_LOCAL_RANK=1",
                                   "KOLO_LOCAL_SIZE=2", "KOLO_COORDINATOR=hostA:7371"));
}

TEST(RankEnvironmentTest, ElasticVariables) {
  RankIdentity id{.socket_path = "/s",
                  .job_id = "j",
                  .job_token = "t",
                  .coordinator = "",
                  .rank = 2,
                  .size = 3,
                  .local_rank = 2,
                  .local_size = 3,
                  .elastic = true,
                  .elastic_min_size = 1,
                  .elastic_max_size = 0,
                  .joiner = true};
  const std::vector<std::string> base = {"A=1", "KOLO_ELASTIC=0", "KOLO_ELASTIC_JOINER=1",
                                         "KOLO_ELASTIC_MAX_SIZE=9"};
  EXPECT_THAT(RankEnvironment(base, id),
              UnorderedElementsAre("A=1", "KOLO_SOCKET=/s", "KOLO_JOB_ID=j", "KOLO_JOB_TOKEN=t",
                                   "KOLO_RANK=2", "KOLO_SIZE=3", "KOLO_LOCAL_RANK=2",
                                   "KOLO_LOCAL_SIZE=3", "KOLO_ELASTIC=1", "KOLO_ELASTIC_MIN_SIZE=1",
                                   "KOLO_ELASTIC_MAX_SIZE=0", "KOLO_ELASTIC_JOINER=1"));
  // Not a joiner, and not elastic: stale values are dropped.
  id.joiner = false;
  EXPECT_THAT(RankEnvironment(base, id), Not(Contains(HasSubstr("KOLO_ELASTIC_JOINER"))));
  id.elastic = false;
  EXPECT_THAT(RankEnvironment(base, id), Not(Contains(HasSubstr("KOLO_ELASTIC"))));
}

TEST(SocketAcceptsTest, TellsListeningFromAbsent) {
  ListeningSocket listening;
  EXPECT_TRUE(SocketAccepts(listening.path()));
  EXPECT_FALSE(SocketAccepts(listening.path() + ".absent"));
  EXPECT_FALSE(SocketAccepts(std::string(200, 'x')));
}

}  // namespace
}  // namespace kolo::kolorun
