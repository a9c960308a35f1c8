// Elastic jobs (LaunchOptions::elastic) run end to end with shell commands as
// ranks: restarts as joiners, blocklisting, discovery, the end of the job.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/kolorun/launcher.h"
#include "client/kolorun/launcher_test_fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::kolorun {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;

// Elastic jobs ---------------------------------------------------------------

// Each rank writes its environment to $DIR/env.<pid> (whole, by rename) so
// that the test, and the other ranks, can see what it was given.
constexpr char kSaveEnv[] = "env > $DIR/tmp.$$; mv $DIR/tmp.$$ $DIR/env.$$; ";
// Waits until some process started as a joiner has saved its environment.
constexpr char kAwaitJoiner[] =
    "while ! grep -qs KOLO_ELASTIC_JOINER=1 $DIR/env.*; do sleep 0.01; done; ";

class ElasticTest : public LauncherTest {
 protected:
  LaunchOptions Elastic(int num_ranks, const std::string& script) {
    LaunchOptions o = Options(num_ranks, script);
    o.job_id = "job-el";
    o.elastic.enabled = true;
    o.elastic.min_ranks = num_ranks;
    o.elastic.max_ranks = num_ranks;
    o.elastic.restart_backoff = absl::Milliseconds(10);
    o.elastic.max_restart_backoff = absl::Milliseconds(40);
    o.elastic.discovery_interval = absl::Milliseconds(20);
    o.elastic.elastic_timeout = absl::Milliseconds(300);
    o.grace = absl::Milliseconds(200);
    o.kill_grace = absl::Seconds(5);
    return o;
  }

  // A discovery script in $DIR that prints `first` on its first run and
  // `later` on every later one (a counter file tells them apart).
  std::string DiscoveryScript(const std::string& first, const std::string& later) {
    const std::string path = dir_.path() + "/discover.sh";
    std::ofstream(path) << "#!/bin/sh\n"
                        << "n=$(cat \"$DIR/count\" 2>/dev/null || echo 0)\n"
                        << "echo $((n + 1)) > \"$DIR/count\"\n"
                        << "if [ \"$n\" -lt 1 ]; then printf '" << first << "'; else printf '"
                        << later << "'; fi\n";
    ::chmod(path.c_str(), 0755);
    return path;
  }

  // The environments the ranks saved, each as its KOLO_* variables.
  std::vector<std::map<std::string, std::string>> SavedEnvironments() const {
    std::vector<std::map<std::string, std::string>> envs;
    for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
      if (!absl::StartsWith(entry.path().filename().string(), "env.")) continue;
      std::map<std::string, std::string> env;
      for (absl::string_view line : absl::StrSplit(ReadFile(entry.path().string()), '\n')) {
        const std::pair<std::string, std::string> kv =
            absl::StrSplit(line, absl::MaxSplits('=', 1));
        if (absl::StartsWith(kv.first, "KOLO_")) env[kv.first] = kv.second;
      }
      envs.push_back(std::move(env));
    }
    return envs;
  }
};

TEST_F(ElasticTest, FailedRankIsRestartedAsAJoiner) {
  LaunchOptions o =
      Elastic(2, absl::StrCat(kSaveEnv,
                              "if [ -z \"$KOLO_ELASTIC_JOINER\" ]; then "
                              "  if [ $KOLO_RANK = 1 ]; then echo failing; exit 3; fi; ",
                              kAwaitJoiner, "fi; echo done"));
  o.elastic.min_ranks = 1;
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << err_.Contents();
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("kolorun: process [1] exited with status 3\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: restarting it on this machine as a joiner in 10ms "
                             "(failure 1 of --max-failures-per-host 3 there)\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: started process [2] as a joiner\n"));
  EXPECT_THAT(out_.Lines(), UnorderedElementsAre("[1] failing", "[0] done", "[2] done"));

  std::vector<std::map<std::string, std::string>> envs = SavedEnvironments();
  ASSERT_EQ(envs.size(), 3u);
  int joiners = 0;
  for (const auto& env : envs) {
    EXPECT_EQ(env.at("KOLO_ELASTIC"), "1");
    EXPECT_EQ(env.at("KOLO_ELASTIC_MIN_SIZE"), "1");
    EXPECT_EQ(env.at("KOLO_ELASTIC_MAX_SIZE"), "2");
    EXPECT_EQ(env.at("KOLO_JOB_ID"), "job-el");
    EXPECT_EQ(env.at("KOLO_SOCKET"), daemon_.path());
    EXPECT_EQ(env.at("KOLO_SIZE"), "2");
    EXPECT_EQ(env.at("KOLO_LOCAL_SIZE"), "2");
    EXPECT_EQ(env.at("KOLO_JOB_TOKEN"), envs[0].at("KOLO_JOB_TOKEN"));
    if (env.count("KOLO_ELASTIC_JOINER") == 0) continue;
    ++joiners;
    EXPECT_EQ(env.at("KOLO_ELASTIC_JOINER"), "1");
    // It fills the failed rank's place.
    EXPECT_EQ(env.at("KOLO_RANK"), "1");
    EXPECT_EQ(env.at("KOLO_LOCAL_RANK"), "1");
  }
  EXPECT_EQ(joiners, 1);
}

TEST_F(ElasticTest, HostThatKeepsFailingIsBlocklistedAndTheJobEnds) {
  LaunchOptions o = Elastic(2,
                            "if [ $KOLO_RANK = 0 ] && [ -z \"$KOLO_ELASTIC_JOINER\" ]; then "
                            "  exec sleep 1000; fi; exit 4");
  o.elastic.max_failures_per_host = 2;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 4);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("kolorun: process [1] exited with status 4\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: restarting it on this machine as a joiner in 10ms"));
  EXPECT_THAT(err, HasSubstr("kolorun: process [2] exited with status 4\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: this machine has failed 2 time(s) "
                             "(--max-failures-per-host 2); blocklisting it: no more ranks "
                             "start there\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: job job-el: 1 rank(s) remain, fewer than --min-np 2; "
                             "ending the job\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: sending SIGTERM to 1 remaining rank\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: process [0] killed by signal SIGTERM\n"));
  EXPECT_THAT(err, Not(HasSubstr("[3]")));
}

// The ranks left below --min-np cannot go on, so they get SIGTERM at once,
// not after --grace_s.
TEST_F(ElasticTest, BelowMinNpTheRanksLeftGetSigtermWithoutTheGrace) {
  LaunchOptions o = Elastic(2,
                            "if [ $KOLO_RANK = 0 ] && [ -z \"$KOLO_ELASTIC_JOINER\" ]; then "
                            "  exec sleep 1000; fi; exit 4");
  o.elastic.max_failures_per_host = 1;
  o.grace = absl::Seconds(60);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 4);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("fewer than --min-np 2; ending the job\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: process [0] killed by signal SIGTERM\n"));
}

TEST_F(ElasticTest, DiscoveredSlotGetsAJoiner) {
  LaunchOptions o = Elastic(2, absl::StrCat(kSaveEnv, "if [ -z \"$KOLO_ELASTIC_JOINER\" ]; then ",
                                            kAwaitJoiner, "fi; echo done"));
  o.elastic.max_ranks = 0;
  o.elastic.discovery_script = DiscoveryScript("localhost:2\\n", "# grown\\nlocalhost:3\\n");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << err_.Contents();
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("kolorun: host discovery: hosts now localhost:3 "
                             "(were localhost:2)\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: started process [2] on localhost as a joiner\n"));
  EXPECT_THAT(out_.Lines(), UnorderedElementsAre("[0] done", "[1] done", "[2] done"));

  std::vector<std::map<std::string, std::string>> envs = SavedEnvironments();
  ASSERT_EQ(envs.size(), 3u);
  std::vector<std::string> joiner_hints;
  for (const auto& env : envs) {
    EXPECT_EQ(env.at("KOLO_ELASTIC_MIN_SIZE"), "2");
    EXPECT_EQ(env.at("KOLO_ELASTIC_MAX_SIZE"), "0");
    if (env.count("KOLO_ELASTIC_JOINER") == 0) {
      EXPECT_EQ(env.at("KOLO_SIZE"), "2");
      continue;
    }
    joiner_hints.push_back(absl::StrCat(env.at("KOLO_RANK"), "/", env.at("KOLO_SIZE"), " ",
                                        env.at("KOLO_LOCAL_RANK"), "/", env.at("KOLO_LOCAL_SIZE")));
  }
  EXPECT_THAT(joiner_hints, ElementsAre("2/3 2/3"));
}

TEST_F(ElasticTest, RankExitingZeroStopsRestarts) {
  // Rank 1 fails once kolorun has reaped rank 0 (its pid is gone).
  LaunchOptions o = Elastic(2,
                            "if [ $KOLO_RANK = 0 ]; then "
                            "  echo $$ > $DIR/r0.tmp; mv $DIR/r0.tmp $DIR/r0; exit 0; fi; "
                            "while [ ! -e $DIR/r0 ]; do sleep 0.01; done; "
                            "while kill -0 $(cat $DIR/r0) 2>/dev/null; do sleep 0.01; done; "
                            "exit 5");
  o.elastic.min_ranks = 1;
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 5);
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("kolorun: process [0] exited with status 0; the job is finishing: "
                             "no more restarts or new ranks\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: process [1] exited with status 5\n"));
  EXPECT_THAT(err, Not(HasSubstr("restarting")));
  EXPECT_THAT(err, Not(HasSubstr("[2]")));
}

TEST_F(ElasticTest, AllRanksSucceedingEndsTheJobCleanly) {
  LaunchOptions o = Elastic(3, "echo ok");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_THAT(out_.Lines(), UnorderedElementsAre("[0] ok", "[1] ok", "[2] ok"));
  EXPECT_THAT(err_.Contents(), Not(HasSubstr("SIGTERM")));
}

TEST_F(ElasticTest, HostLeavingTheListHasItsRanksStopped) {
  LaunchOptions o = Elastic(2, "exec sleep 1000");
  o.elastic.max_ranks = 0;
  o.elastic.discovery_script = DiscoveryScript("localhost:2\\n", "");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("kolorun: host discovery: hosts now none (were localhost:2)\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: process [0] on localhost: its host left the host list; "
                             "stopping it\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: process [1] on localhost killed by signal SIGTERM "
                             "(stopped: its host left the host list)\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: job job-el: 0 rank(s) remain, fewer than --min-np 2; "
                             "ending the job\n"));
  EXPECT_THAT(err, Not(HasSubstr("restarting")));
}

TEST_F(ElasticTest, FailedDiscoveryKeepsThePreviousHosts) {
  // The second run fails, the third prints garbage; the ranks go on until
  // the fourth has run.
  const std::string script = dir_.path() + "/discover.sh";
  std::ofstream(script) << "#!/bin/sh\n"
                        << "n=$(cat \"$DIR/count\" 2>/dev/null || echo 0)\n"
                        << "echo $((n + 1)) > \"$DIR/count\"\n"
                        << "case $n in 0) echo localhost:1;; 1) echo oops >&2; exit 7;; "
                        << "2) echo 'a b';; *) touch \"$DIR/fourth\"; echo localhost:1;; esac\n";
  ::chmod(script.c_str(), 0755);
  LaunchOptions o = Elastic(1, "while [ ! -e $DIR/fourth ]; do sleep 0.01; done");
  o.elastic.discovery_script = script;
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << err_.Contents();
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("[discovery] oops\n"));
  EXPECT_THAT(err, HasSubstr(absl::StrCat("kolorun: host discovery `", script,
                                          "` exited with status 7; keeping the previous host "
                                          "list\n")));
  EXPECT_THAT(err, HasSubstr("discovery output line 1 \"a b\""));
  EXPECT_THAT(err, Not(HasSubstr("hosts now")));
}

TEST_F(ElasticTest, TooFewDiscoveredSlotsAtTheStartTimeOut) {
  LaunchOptions o = Elastic(2, "echo should-not-run");
  o.elastic.max_ranks = 0;
  o.elastic.discovery_script = DiscoveryScript("localhost:1\\n", "localhost:1\\n");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_FALSE(code.ok());
  EXPECT_EQ(code.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(code.status().message()),
              HasSubstr("host discovery found 1 slot(s) (localhost:1), fewer than --min-np 2"));
  EXPECT_THAT(err_.Contents(), HasSubstr("waiting up to 300ms for more"));
  EXPECT_EQ(out_.Contents(), "");
}

TEST_F(ElasticTest, FewerDiscoveredSlotsThanNpStartWhatFits) {
  LaunchOptions o = Elastic(3, "echo $KOLO_RANK/$KOLO_SIZE");
  o.elastic.min_ranks = 1;
  o.elastic.max_ranks = 0;
  o.elastic.discovery_script = DiscoveryScript("localhost:2\\n", "localhost:2\\n");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_THAT(out_.Lines(), UnorderedElementsAre("[0] 0/2", "[1] 1/2"));
}

TEST_F(ElasticTest, BrokenDiscoveryAtTheStartIsAnError) {
  LaunchOptions o = Elastic(1, "echo should-not-run");
  o.elastic.discovery_script = DiscoveryScript("host:x\\n", "");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_FALSE(code.ok());
  EXPECT_THAT(std::string(code.status().message()),
              HasSubstr("discovery output line 1 \"host:x\""));
  o.elastic.discovery_script = dir_.path() + "/absent.sh";
  code = RunJob(o);
  ASSERT_FALSE(code.ok());
  EXPECT_THAT(std::string(code.status().message()),
              AllOf(HasSubstr("--host-discovery-script"), HasSubstr("absent.sh")));
  EXPECT_EQ(out_.Contents(), "");
}

TEST_F(ElasticTest, PrivateDaemonLivesAcrossRestarts) {
  const std::string record = dir_.path() + "/record";
  LaunchOptions o = Elastic(1,
                            "test -S \"$KOLO_SOCKET\" || exit 9; echo $KOLO_SOCKET; "
                            "[ -n \"$KOLO_ELASTIC_JOINER\" ]");
  o.private_daemon = true;
  o.kolod_args = {"--record=" + record};
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << err_.Contents();
  const std::vector<std::string> lines = out_.Lines();
  ASSERT_EQ(lines.size(), 2u) << out_.Contents() << err_.Contents();
  EXPECT_EQ(lines[0].substr(4), lines[1].substr(4));
  EXPECT_THAT(lines, UnorderedElementsAre(StartsWith("[0] "), StartsWith("[1] ")));
  // Started once, stopped once, at the end.
  const std::string recorded = ReadFile(record);
  EXPECT_THAT(recorded, StartsWith("--socket "));
  EXPECT_THAT(recorded, ::testing::EndsWith("\nSIGTERM\n"));
  EXPECT_EQ(std::count(recorded.begin(), recorded.end(), '\n'), 2);
}

TEST_F(ElasticTest, SignalStopsRestarts) {
  // Once both ranks run, rank 0 sends SIGTERM to the launcher (its parent),
  // which forwards it: the ranks die of it and are not restarted.
  LaunchOptions o = Elastic(2,
                            "touch $DIR/ready.$KOLO_RANK; "
                            "if [ $KOLO_RANK = 0 ]; then "
                            "  while [ ! -e $DIR/ready.1 ]; do sleep 0.01; done; kill -TERM $PPID; "
                            "fi; exec sleep 1000");
  o.elastic.min_ranks = 1;
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 128 + SIGTERM);
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("kolorun: received SIGTERM; forwarding it to the ranks\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: process [1] killed by signal SIGTERM\n"));
  EXPECT_THAT(err, Not(HasSubstr("restarting")));
}

TEST_F(ElasticTest, JobStartedHereIgnoresOtherHosts) {
  // Discovery adds a host elsewhere on its second run; the rank ends once the
  // third has begun (runs are sequential, so the second has been applied).
  const std::string script = dir_.path() + "/discover.sh";
  std::ofstream(script) << "#!/bin/sh\n"
                        << "n=$(cat \"$DIR/count\" 2>/dev/null || echo 0)\n"
                        << "echo $((n + 1)) > \"$DIR/count\"\n"
                        << "[ $n -ge 2 ] && touch \"$DIR/third\"\n"
                        << "echo localhost:1; [ $n -ge 1 ] && echo farhost:2; exit 0\n";
  ::chmod(script.c_str(), 0755);
  LaunchOptions o = Elastic(1, "while [ ! -e $DIR/third ]; do sleep 0.01; done; echo ok");
  o.elastic.max_ranks = 0;
  o.elastic.discovery_script = script;
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << err_.Contents();
  EXPECT_THAT(err_.Contents(), HasSubstr("kolorun: ignoring host farhost: the job started on "
                                         "this machine only"));
  EXPECT_THAT(err_.Contents(), Not(HasSubstr("hosts now")));
  EXPECT_THAT(out_.Lines(), ElementsAre("[0] ok"));
}

TEST_F(ElasticTest, HostListNamingSeveralHostsNeedsTheSystemDaemon) {
  LaunchOptions o = Elastic(1, "echo should-not-run");
  o.elastic.max_ranks = 0;
  o.this_host = "kolo-test-node";
  o.socket_path = dir_.path() + "/nobody-here.sock";
  o.elastic.discovery_script = DiscoveryScript("localhost:1\\nfarhost:2\\n", "");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_FALSE(code.ok());
  EXPECT_EQ(code.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(code.status().message()),
              HasSubstr("needs the system kolod running on every host"));
}

TEST_F(ElasticTest, ThisMachineKeepsOneNameAcrossDiscoveryRuns) {
  LaunchOptions o = Elastic(1, absl::StrCat(kSaveEnv, "if [ -z \"$KOLO_ELASTIC_JOINER\" ]; then ",
                                            kAwaitJoiner, "fi; echo done"));
  o.this_host = "kolo-test-node";
  o.elastic.max_ranks = 0;
  o.elastic.discovery_script = DiscoveryScript("localhost:1\\n", "kolo-test-node:2\\n");
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << err_.Contents();
  const std::string err = err_.Contents();
  EXPECT_THAT(err, HasSubstr("kolorun: host discovery: hosts now localhost:2 "
                             "(were localhost:1)\n"));
  EXPECT_THAT(err, HasSubstr("kolorun: started process [1] on localhost as a joiner\n"));
  EXPECT_THAT(err, Not(HasSubstr("stopping it")));
  EXPECT_THAT(out_.Lines(), UnorderedElementsAre("[0] done", "[1] done"));
}

TEST_F(ElasticTest, InvalidElasticOptionsAreRejected) {
  LaunchOptions o = Elastic(2, "true");
  o.elastic.min_ranks = 3;
  EXPECT_THAT(std::string(RunJob(o).status().message()),
              HasSubstr("--min-np 3 is more than -np 2"));
  o = Elastic(2, "true");
  o.coordinator = "hostA:7371";
  o.private_daemon = true;
  EXPECT_THAT(std::string(ValidateOptions(o).message()),
              HasSubstr("--private_daemon cannot serve an elastic job given --coordinator"));
  o.private_daemon = false;
  o.coordinator = "nohostport";
  EXPECT_THAT(std::string(ValidateOptions(o).message()), HasSubstr("is not HOST:PORT"));
}

// Elastic jobs spanning hosts, with the fake ssh.
class ElasticMultiHostTest : public MultiHostTest {};

TEST_F(ElasticMultiHostTest, RemoteJoinerGetsTheElasticEnvironmentOverSsh) {
  // The remote rank fails once; its restart goes to the same host over ssh.
  LaunchOptions o = HostOptions(2, {{"localhost", 1}, {"fakehost", 1}},
                                "if [ $KOLO_RANK = 1 ] && [ -z \"$KOLO_ELASTIC_JOINER\" ]; then "
                                "  exit 3; fi; "
                                "echo $KOLO_ELASTIC $KOLO_ELASTIC_MIN_SIZE $KOLO_ELASTIC_MAX_SIZE "
                                "${KOLO_ELASTIC_JOINER:-0} $KOLO_RANK $KOLO_COORDINATOR; "
                                "if [ $KOLO_RANK = 0 ]; then "
                                "  while [ ! -e $DIR/joined ]; do sleep 0.01; done; "
                                "else touch $DIR/joined; fi");
  o.base_env.push_back("KOLO_ELASTIC_JOINER=stale");
  o.elastic.enabled = true;
  o.elastic.min_ranks = 1;
  o.elastic.max_ranks = 2;
  o.elastic.restart_backoff = absl::Milliseconds(10);
  o.elastic.max_restart_backoff = absl::Milliseconds(10);
  // The fake ssh passes only KOLO_* and PATH, so DIR goes in a KOLO_ name.
  o.command = {"/bin/sh", "-c", absl::StrCat("DIR=$KOLO_TEST_DIR; ", o.command[2])};
  o.base_env.push_back(absl::StrCat("KOLO_TEST_DIR=", dir_.path()));
  absl::StatusOr<int> code = RunJob(o);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << err_.Contents();
  EXPECT_THAT(err_.Contents(),
              HasSubstr("kolorun: process [1] on fakehost exited with status 3\n"));
  EXPECT_THAT(err_.Contents(), HasSubstr("restarting it on host fakehost as a joiner"));
  EXPECT_THAT(out_.Lines(), UnorderedElementsAre("[0] 1 1 2 0 0 kolo-test-node:7371",
                                                 "[2] 1 1 2 1 1 kolo-test-node:7371"));
  EXPECT_EQ(SshCalls().size(), 2u);
}

}  // namespace
}  // namespace kolo::kolorun
