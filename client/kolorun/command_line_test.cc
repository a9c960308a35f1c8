#include "client/kolorun/command_line.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::kolorun {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(SplitCommandLineTest, SplitsAtFirstDoubleDash) {
  auto cl = SplitCommandLine({"kolorun", "-np", "2", "--", "python3", "t.py", "--", "--epochs=3"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->flag_args, ElementsAre("kolorun", "-np", "2"));
  EXPECT_THAT(cl->command, ElementsAre("python3", "t.py", "--", "--epochs=3"));
  EXPECT_THAT(cl->kolod_args, IsEmpty());
}

TEST(SplitCommandLineTest, CollectsEveryKolodArgInOrder) {
  auto cl = SplitCommandLine({"kolorun", "--kolod_arg=--a=1", "-np=2", "--kolod_arg", "--b",
                              "-kolod_arg=c", "--", "--kolod_arg=not-ours"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->kolod_args, ElementsAre("--a=1", "--b", "c"));
  EXPECT_THAT(cl->flag_args, ElementsAre("kolorun", "-np=2"));
  EXPECT_THAT(cl->command, ElementsAre("--kolod_arg=not-ours"));
}

TEST(SplitCommandLineTest, CollectsEverySshArgApartFromKolodArgs) {
  auto cl =
      SplitCommandLine({"kolorun", "--ssh_arg=-p", "--ssh_arg", "2222", "-H", "a:1",
                        "--kolod_arg=--v", "-ssh_arg=-q", "--ssh_argv=1", "--", "--ssh_arg=x"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->ssh_args, ElementsAre("-p", "2222", "-q"));
  EXPECT_THAT(cl->kolod_args, ElementsAre("--v"));
  EXPECT_THAT(cl->flag_args, ElementsAre("kolorun", "-H", "a:1", "--ssh_argv=1"));
  EXPECT_THAT(cl->command, ElementsAre("--ssh_arg=x"));
  EXPECT_FALSE(SplitCommandLine({"kolorun", "--ssh_arg"}).ok());
}

TEST(SplitCommandLineTest, KolodArgWithoutValueIsAnError) {
  EXPECT_FALSE(SplitCommandLine({"kolorun", "--kolod_arg"}).ok());
  EXPECT_FALSE(SplitCommandLine({"kolorun", "--kolod_arg", "--", "x"}).ok());
}

TEST(SplitCommandLineTest, SimilarFlagNamesAndPositionalsPassThrough) {
  auto cl = SplitCommandLine({"kolorun", "--kolod_argx=1", "--kolod=/k", "cmd"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->flag_args, ElementsAre("kolorun", "--kolod_argx=1", "--kolod=/k", "cmd"));
  EXPECT_THAT(cl->command, IsEmpty());
}

TEST(SplitCommandLineTest, EmptyCommandAfterDoubleDash) {
  auto cl = SplitCommandLine({"kolorun", "-np", "1", "--"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->command, IsEmpty());
}

TEST(SplitCommandLineTest, DashedSpellingOfKnownFlags) {
  const std::vector<std::string> names = {"min_np", "host_discovery_script", "kolod_arg", "job_id"};
  auto cl = SplitCommandLine(
      {"kolorun", "--min-np=2", "-host-discovery-script", "./find-hosts", "--job_id", "-not-a-flag",
       "--kolod-arg", "--x-y", "--max-np", "3", "--", "--min-np=9"},
      names);
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->flag_args,
              ElementsAre("kolorun", "--min_np=2", "-host_discovery_script", "./find-hosts",
                          "--job_id", "-not-a-flag", "--max-np", "3"));
  EXPECT_THAT(cl->kolod_args, ElementsAre("--x-y"));
  EXPECT_THAT(cl->command, ElementsAre("--min-np=9"));
}

}  // namespace
}  // namespace kolo::kolorun
