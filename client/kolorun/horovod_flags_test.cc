#include "client/kolorun/horovod_flags.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::kolorun {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

bool IsBool(absl::string_view name) { return name == "private_daemon" || name == "help"; }

absl::StatusOr<std::string> NoFile(const std::string& path) {
  return absl::NotFoundError("no such file: " + path);
}

absl::StatusOr<HorovodTranslation> Translate(const std::vector<std::string>& argv) {
  return TranslateHorovodFlags(argv, IsBool, NoFile);
}

TEST(HorovodFlagsTest, CommandStartsAtFirstPositionalAndKolorunFlagsPass) {
  auto t = Translate({"horovodrun", "-np", "2", "-H", "a:1,b:1", "--private_daemon", "python3",
                      "t.py", "--epochs", "3", "-p", "9"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->argv, ElementsAre("horovodrun", "-np", "2", "-H", "a:1,b:1", "--private_daemon",
                                   "--", "python3", "t.py", "--epochs", "3", "-p", "9"));
  EXPECT_THAT(t->env, IsEmpty());
  EXPECT_THAT(t->notes, IsEmpty());
}

TEST(HorovodFlagsTest, ExistingDoubleDashIsKept) {
  auto t = Translate({"kolorun", "--np=2", "--", "--fusion-threshold-mb", "1"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->argv, ElementsAre("kolorun", "--np=2", "--", "--fusion-threshold-mb", "1"));
}

TEST(HorovodFlagsTest, NumProcIsNp) {
  auto t = Translate({"horovodrun", "--num-proc", "3", "x"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->argv, ElementsAre("horovodrun", "--np=3", "--", "x"));
}

TEST(HorovodFlagsTest, SshPortAndIdentityBecomeSshArgs) {
  for (const char* flag : {"-p", "--ssh-port"}) {
    auto t = Translate({"horovodrun", flag, "2222", "-i", "/k", "x"});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_THAT(t->argv, ElementsAre("horovodrun", "--ssh_arg=-p", "--ssh_arg=2222",
                                     "--ssh_arg=-i", "--ssh_arg=/k", "--", "x"));
  }
  auto eq = Translate({"horovodrun", "--ssh-port=22", "x"});
  ASSERT_TRUE(eq.ok());
  EXPECT_THAT(eq->argv, ElementsAre("horovodrun", "--ssh_arg=-p", "--ssh_arg=22", "--", "x"));
  EXPECT_FALSE(Translate({"horovodrun", "-p", "abc", "x"}).ok());
  EXPECT_FALSE(Translate({"horovodrun", "-p"}).ok());
}

TEST(HorovodFlagsTest, Hostfile) {
  auto read = [](const std::string& path) -> absl::StatusOr<std::string> {
    EXPECT_EQ(path, "/h");
    return std::string("# hosts\nnode1 slots=2\n\n  node2:3 \nnode3\n");
  };
  auto t = TranslateHorovodFlags({"horovodrun", "-np", "6", "--hostfile", "/h", "x"}, IsBool, read);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->argv,
              ElementsAre("horovodrun", "-np", "6", "--hosts=node1:2,node2:3,node3", "--", "x"));
  EXPECT_FALSE(Translate({"horovodrun", "--hostfile", "/nope", "x"}).ok());
  EXPECT_FALSE(HostfileToHostList("a slots=x\n").ok());
  EXPECT_FALSE(HostfileToHostList("a slots=0\n").ok());
  EXPECT_FALSE(HostfileToHostList("# none\n").ok());
}

TEST(HorovodFlagsTest, DaemonSettingsGoToThePrivateKolod) {
  auto t = Translate({"horovodrun", "--stall-check-warning-time-seconds", "30",
                      "--stall-check-shutdown-time-seconds", "120", "--log-level", "WARNING",
                      "x"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->argv, ElementsAre("horovodrun", "--kolod_arg=--stall_warning_s=30",
                                   "--kolod_arg=--stall_timeout_s=120",
                                   "--kolod_arg=--log_level=warn", "--", "x"));
  EXPECT_THAT(t->env, IsEmpty());
  ASSERT_THAT(t->notes, SizeIs(3));
  for (const std::string& note : t->notes) EXPECT_THAT(note, HasSubstr("private kolod"));
  EXPECT_FALSE(Translate({"horovodrun", "--stall-check-warning-time-seconds", "soon", "x"}).ok());
  EXPECT_FALSE(Translate({"horovodrun", "--log-level", "LOUD", "x"}).ok());
}

TEST(HorovodFlagsTest, FusionThresholdAndCacheCapacityAreTheJobsOwn) {
  auto t = Translate({"horovodrun", "--fusion-threshold-mb", "32", "--cache-capacity=2048", "x"});
  ASSERT_TRUE(t.ok()) << t.status();
  // The private kolod reads KOLO_FUSION_THRESHOLD itself; its response cache
  // is raised to the capacity asked, above its default 1024.
  EXPECT_THAT(t->argv, ElementsAre("horovodrun", "--kolod_arg=--response_cache=2048", "--", "x"));
  EXPECT_THAT(t->env, ElementsAre("KOLO_FUSION_THRESHOLD=33554432", "KOLO_CACHE_CAPACITY=2048"));
  ASSERT_THAT(t->notes, SizeIs(2));
  for (const std::string& note : t->notes) EXPECT_THAT(note, HasSubstr("private kolod"));
  EXPECT_THAT(t->notes[1], HasSubstr("--response_cache=2048"));

  auto small = Translate({"horovodrun", "--fusion-threshold-mb=0", "--cache-capacity", "16", "x"});
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_THAT(small->argv, ElementsAre("horovodrun", "--", "x"));
  EXPECT_THAT(small->env, ElementsAre("KOLO_FUSION_THRESHOLD=0", "KOLO_CACHE_CAPACITY=16"));

  auto bad = Translate({"horovodrun", "--fusion-threshold-mb", "-1", "x"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("--fusion-threshold-mb"));
  EXPECT_FALSE(Translate({"horovodrun", "--fusion-threshold-mb", "2.5", "x"}).ok());
  EXPECT_FALSE(Translate({"horovodrun", "--cache-capacity", "many", "x"}).ok());
}

TEST(HorovodFlagsTest, AutotuneSettingsReachEveryRank) {
  auto t = Translate({"horovodrun", "--autotune", "--autotune-log-file", "/l",
                      "--autotune-warmup-samples", "0", "--autotune-steps-per-sample=20",
                      "--autotune-bayes-opt-max-samples", "30",
                      "--autotune-gaussian-process-noise", "0.5", "x"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->argv, ElementsAre("horovodrun", "--", "x"));
  EXPECT_THAT(t->env, ElementsAre("KOLO_AUTOTUNE=1", "KOLO_AUTOTUNE_LOG=/l",
                                  "KOLO_AUTOTUNE_WARMUP_SAMPLES=0",
                                  "KOLO_AUTOTUNE_STEPS_PER_SAMPLE=20",
                                  "KOLO_AUTOTUNE_BAYES_OPT_MAX_SAMPLES=30",
                                  "KOLO_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=0.5"));
  EXPECT_THAT(t->notes, IsEmpty());

  // A knob without --autotune: passed on, with one note.
  auto alone = Translate({"horovodrun", "--autotune-log-file", "/l",
                          "--autotune-warmup-samples", "3", "x"});
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_THAT(alone->env, ElementsAre("KOLO_AUTOTUNE_LOG=/l", "KOLO_AUTOTUNE_WARMUP_SAMPLES=3"));
  ASSERT_THAT(alone->notes, SizeIs(1));
  EXPECT_THAT(alone->notes[0], HasSubstr("without --autotune"));

  for (const std::vector<std::string>& flag : std::vector<std::vector<std::string>>{
           {"--autotune-warmup-samples", "101"},
           {"--autotune-warmup-samples", "-1"},
           {"--autotune-steps-per-sample", "0"},
           {"--autotune-steps-per-sample", "10001"},
           {"--autotune-bayes-opt-max-samples", "0"},
           {"--autotune-bayes-opt-max-samples", "1001"},
           {"--autotune-gaussian-process-noise", "0"},
           {"--autotune-gaussian-process-noise", "100.5"},
           {"--autotune-gaussian-process-noise", "nan"},
           {"--autotune-gaussian-process-noise", "lots"},
       }) {
    auto r = Translate({"horovodrun", flag[0], flag[1], "x"});
    ASSERT_FALSE(r.ok()) << flag[0] << " " << flag[1];
    EXPECT_THAT(r.status().message(), HasSubstr(flag[0]));
  }
  EXPECT_TRUE(Translate({"horovodrun", "--autotune-gaussian-process-noise", "100", "x"}).ok());
  EXPECT_FALSE(Translate({"horovodrun", "--autotune=1", "x"}).ok());
}

TEST(HorovodFlagsTest, LogLevels) {
  for (auto [horovod, kolod] : std::vector<std::pair<std::string, std::string>>{
           {"TRACE", "trace"}, {"DEBUG", "debug"}, {"INFO", "info"},
           {"WARNING", "warn"}, {"ERROR", "error"}, {"FATAL", "error"}}) {
    auto t = Translate({"horovodrun", "--log-level=" + horovod, "x"});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->argv[1], "--kolod_arg=--log_level=" + kolod);
  }
}

TEST(HorovodFlagsTest, NoStallCheck) {
  auto t = Translate({"horovodrun", "--no-stall-check", "x"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->argv, ElementsAre("horovodrun", "--kolod_arg=--stall_warning_s=1000000000",
                                   "--kolod_arg=--stall_timeout_s=0", "--", "x"));
}

TEST(HorovodFlagsTest, TimelineIsKoloTimeline) {
  auto t = Translate({"horovodrun", "--timeline-filename", "/tmp/t.json", "--timeline-mark-cycles",
                      "x"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->argv, ElementsAre("horovodrun", "--", "x"));
  EXPECT_THAT(t->env, ElementsAre("KOLO_TIMELINE=/tmp/t.json"));
  ASSERT_THAT(t->notes, SizeIs(1));
  EXPECT_THAT(t->notes[0], HasSubstr("--timeline-mark-cycles"));
}

TEST(HorovodFlagsTest, StartTimeout) {
  auto t = Translate({"horovodrun", "--start-timeout", "60", "x"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->argv, ElementsAre("horovodrun", "--daemon_start_timeout_s=60", "--", "x"));
  EXPECT_THAT(t->notes, SizeIs(1));
  EXPECT_FALSE(Translate({"horovodrun", "--start-timeout", "-3", "x"}).ok());
}

TEST(HorovodFlagsTest, FlagsWithoutEquivalentEachPrintOneNote) {
  const std::vector<std::vector<std::string>> cases = {
      {"--cycle-time-ms", "5"},      {"--network-interface", "eth0"},
      {"--hierarchical-allreduce"},  {"--hierarchical-allgather"},
      {"--gloo"},                    {"--mpi"},
      {"--timeline-mark-cycles"},
  };
  for (const auto& flags : cases) {
    std::vector<std::string> argv = {"horovodrun"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("x");
    auto t = Translate(argv);
    ASSERT_TRUE(t.ok()) << flags[0] << ": " << t.status();
    EXPECT_THAT(t->argv, ElementsAre("horovodrun", "--", "x")) << flags[0];
    ASSERT_THAT(t->notes, SizeIs(1)) << flags[0];
    EXPECT_THAT(t->notes[0], HasSubstr(flags[0].substr(0, 10))) << flags[0];
  }
  auto t = Translate({"horovodrun", "--cycle-time-ms", "5", "x"});
  ASSERT_TRUE(t.ok());
  EXPECT_THAT(t->notes[0], HasSubstr("--autotune tunes the fusion threshold"));
  EXPECT_FALSE(Translate({"horovodrun", "--gloo=1", "x"}).ok());
}

TEST(HorovodFlagsTest, VerboseAndCheckBuild) {
  auto t = Translate({"horovodrun", "--verbose", "--check-build"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->verbose);
  EXPECT_TRUE(t->check_build);
  EXPECT_THAT(t->argv, ElementsAre("horovodrun"));
  EXPECT_THAT(CheckBuildReport(), HasSubstr("[X] kolod"));
  EXPECT_THAT(CheckBuildReport(), HasSubstr("[X] UCX"));
  EXPECT_THAT(CheckBuildReport(), HasSubstr("NCCL"));
}

TEST(HorovodFlagsTest, OutputFilenameIsKolorunsOwnFlag) {
  auto t = Translate({"horovodrun", "--output-filename", "/o", "x"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->argv, ElementsAre("horovodrun", "--output-filename", "/o", "--", "x"));
  EXPECT_THAT(t->notes, IsEmpty());
}

TEST(HorovodFlagsTest, ConfigFileIsRefused) {
  auto config = Translate({"horovodrun", "--config-file", "c.yaml", "x"});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("horovodrun"));
}

}  // namespace
}  // namespace kolo::kolorun
