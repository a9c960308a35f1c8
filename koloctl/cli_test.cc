#include "koloctl/cli.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace kolo::koloctl {
namespace {

absl::StatusOr<Invocation> Parse(std::vector<std::string> args, Environment env = {}) {
  return ParseCommandLine(args, env);
}

TEST(ParseCommandLineTest, DefaultsToTheNodeSocket) {
  auto inv = Parse({"jobs"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->command, Command::kJobs);
  EXPECT_EQ(inv->target, "unix:/run/kolo/kolod.sock");
  EXPECT_FALSE(inv->options.json);
  EXPECT_EQ(inv->options.timeout, absl::Seconds(10));
}

TEST(ParseCommandLineTest, SocketFromEnvironmentThenFlagThenAddressWins) {
  Environment env{"/tmp/k/kolod.sock", std::nullopt};
  auto inv = Parse({"status"}, env);
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->target, "unix:/tmp/k/kolod.sock");
  inv = Parse({"--socket=/x.sock", "status"}, env);
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->target, "unix:/x.sock");
  inv = Parse({"--socket", "/x.sock", "--address", "127.0.0.1:7370", "status"}, env);
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->target, "127.0.0.1:7370");
}

TEST(ParseCommandLineTest, GlobalFlagsAfterTheCommand) {
  auto inv = Parse({"job", "train-a", "--json", "--timeout_s", "0.5"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->command, Command::kJob);
  EXPECT_EQ(inv->job_id, "train-a");
  EXPECT_TRUE(inv->options.json);
  EXPECT_EQ(inv->options.timeout, absl::Milliseconds(500));
}

TEST(ParseCommandLineTest, TimelineAndItsFlags) {
  auto inv = Parse({"timeline", "start", "--max_events", "1000"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->command, Command::kTimelineStart);
  EXPECT_EQ(inv->max_events, 1000u);
  inv = Parse({"timeline", "stop"});
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->out_path, "kolo-timeline.json");
  inv = Parse({"timeline", "stop", "--out=/tmp/t.json"});
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->out_path, "/tmp/t.json");
}

TEST(ParseCommandLineTest, UsageErrorsAreInvalidArgument) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {},
           {"bogus"},
           {"job"},
           {"job", "a", "b"},
           {"jobs", "extra"},
           {"timeline"},
           {"timeline", "pause"},
           {"timeline", "stop", "--max_events", "5"},
           {"timeline", "start", "--max_events", "many"},
           {"status", "--out", "x"},
           {"status", "--reason", "x"},
           {"status", "--timeout_s", "0"},
           {"status", "--timeout_s"},
           {"status", "--frobnicate"},
           {"status", "--json=maybe"},
           {"loglevel"},
       }) {
    auto inv = Parse(args);
    EXPECT_TRUE(absl::IsInvalidArgument(inv.status()))
        << "args: " << testing::PrintToString(args) << " -> " << inv.status();
  }
}

TEST(ParseCommandLineTest, Help) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--help"}, {"-h"}, {"help"}, {"jobs", "--help"}}) {
    auto inv = Parse(args);
    ASSERT_TRUE(inv.ok()) << inv.status();
    EXPECT_EQ(inv->command, Command::kHelp);
  }
  const std::string usage = UsageText();
  for (const char* word :
       {"status", "jobs", "job ID", "stalls", "metrics", "timeline start", "timeline stop",
        "abort JOB", "drain", "loglevel", "--socket", "--address", "--json", "--timeout_s",
        "--admin_token", "--admin_token_file", "KOLO_ADMIN_TOKEN", "KOLO_SOCKET"}) {
    EXPECT_NE(usage.find(word), std::string::npos) << word;
  }
}

TEST(ParseCommandLineTest, DashDashEndsFlags) {
  auto inv = Parse({"job", "--", "--weird-id"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->job_id, "--weird-id");
}

TEST(ParseCommandLineTest, ReadOnlyCommandsNeedNoToken) {
  auto inv = Parse({"--socket", "/nonexistent/kolod.sock", "status"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->options.admin_token, "");
}

class AdminTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/koloctl-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    socket_ = dir_ + "/kolod.sock";
  }
  void TearDown() override {
    std::remove((dir_ + "/admin.token").c_str());
    std::remove((dir_ + "/other.token").c_str());
    rmdir(dir_.c_str());
  }
  void Write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ + "/" + name) << content;
  }
  std::string dir_;
  std::string socket_;
};

TEST_F(AdminTokenTest, Precedence) {
  Write("admin.token", "from-dir\n");
  Write("other.token", "  from-file \n");
  Environment env{std::nullopt, "from-env"};
  auto t = ResolveAdminToken("from-flag", dir_ + "/other.token", env, socket_);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token, "from-flag");
  EXPECT_EQ(t->source, "--admin_token");
  t = ResolveAdminToken(std::nullopt, dir_ + "/other.token", env, socket_);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token, "from-file");
  t = ResolveAdminToken(std::nullopt, std::nullopt, env, socket_);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token, "from-env");
  EXPECT_EQ(t->source, "KOLO_ADMIN_TOKEN");
  t = ResolveAdminToken(std::nullopt, std::nullopt, Environment{}, socket_);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token, "from-dir");
  EXPECT_EQ(t->source, dir_ + "/admin.token");
}

TEST_F(AdminTokenTest, MissingTokenSaysWhereItLooked) {
  auto inv = Parse({"--socket", socket_, "drain"});
  ASSERT_FALSE(inv.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(inv.status())) << inv.status();
  const std::string message(inv.status().message());
  for (const std::string& place : {std::string("--admin_token"), std::string("--admin_token_file"),
                                   std::string("KOLO_ADMIN_TOKEN"), dir_ + "/admin.token"}) {
    EXPECT_NE(message.find(place), std::string::npos) << place << " in " << message;
  }
}

TEST_F(AdminTokenTest, EmptyOrMissingTokenFile) {
  Write("other.token", "\n");
  auto t = ResolveAdminToken(std::nullopt, dir_ + "/other.token", Environment{}, socket_);
  EXPECT_TRUE(absl::IsUnauthenticated(t.status())) << t.status();
  t = ResolveAdminToken(std::nullopt, dir_ + "/absent.token", Environment{}, socket_);
  EXPECT_TRUE(absl::IsNotFound(t.status())) << t.status();
}

TEST_F(AdminTokenTest, AdminCommandCarriesTheToken) {
  Write("admin.token", "tok\n");
  auto inv = Parse({"--socket", socket_, "loglevel", "debug"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->level, "debug");
  EXPECT_EQ(inv->options.admin_token, "tok");
  EXPECT_EQ(inv->options.admin_token_source, dir_ + "/admin.token");
}

}  // namespace
}  // namespace kolo::koloctl
