#include "client/kolorun/discovery.h"

#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::kolorun {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST(ParseDiscoveryOutputTest, HostsWithAndWithoutSlots) {
  absl::StatusOr<std::vector<HostSlots>> hosts =
      ParseDiscoveryOutput("hostA:4\nhostB\n[fe80::1]:2\n", "node1");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts,
              ElementsAre(HostSlots{"hostA", 4}, HostSlots{"hostB", 1}, HostSlots{"fe80::1", 2}));
}

TEST(ParseDiscoveryOutputTest, SkipsBlankLinesCommentsAndSpaces) {
  absl::StatusOr<std::vector<HostSlots>> hosts = ParseDiscoveryOutput(
      "# the cluster now\n\n  hostA:2  \r\n\t\nhostB:1 # spare\n#hostC:8", "node1");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre(HostSlots{"hostA", 2}, HostSlots{"hostB", 1}));
}

TEST(ParseDiscoveryOutputTest, NoHostsIsValid) {
  absl::StatusOr<std::vector<HostSlots>> hosts = ParseDiscoveryOutput("# nothing\n", "node1");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, IsEmpty());
  EXPECT_THAT(*ParseDiscoveryOutput("", "node1"), IsEmpty());
}

TEST(ParseDiscoveryOutputTest, BadLinesAreNamed) {
  EXPECT_THAT(Message(ParseDiscoveryOutput("hostA:2\nhostB:x\n", "n").status()),
              HasSubstr("discovery output line 2 \"hostB:x\": slots \"x\""));
  EXPECT_THAT(Message(ParseDiscoveryOutput("hostA:0", "n").status()),
              HasSubstr("line 1 \"hostA:0\": slots \"0\""));
  EXPECT_THAT(Message(ParseDiscoveryOutput("\nhost A:2", "n").status()),
              HasSubstr("line 2 \"host A:2\": a host name must not contain spaces"));
  EXPECT_THAT(Message(ParseDiscoveryOutput("a,b:2", "n").status()),
              HasSubstr("line 1 \"a,b:2\": a host name must not contain ','"));
  EXPECT_THAT(Message(ParseDiscoveryOutput(":2", "n").status()), HasSubstr("empty host name"));
  EXPECT_THAT(Message(ParseDiscoveryOutput("-oProxy=x", "n").status()),
              HasSubstr("must not start with '-'"));
  EXPECT_EQ(ParseDiscoveryOutput("a:b:c:", "n").status().code(), absl::StatusCode::kOk)
      << "a bare IPv6-like literal is a host with 1 slot";
}

TEST(ParseDiscoveryOutputTest, DuplicatesAreErrors) {
  EXPECT_THAT(Message(ParseDiscoveryOutput("hostA:2\nhostB\nHOSTA:1\n", "n").status()),
              HasSubstr("line 3 \"HOSTA:1\": host HOSTA is already on line 1"));
  EXPECT_THAT(Message(ParseDiscoveryOutput("localhost:2\nnode1:2\n", "node1").status()),
              HasSubstr("line 2 \"node1:2\": this machine is already on line 1"));
}

// A script in a fresh directory, written and made executable.
class HostDiscoveryTest : public ::testing::Test {
 protected:
  HostDiscoveryTest() {
    const char* tmp = ::getenv("TEST_TMPDIR");
    std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/discovery.XXXXXX");
    EXPECT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  ~HostDiscoveryTest() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string Script(const std::string& body) {
    const std::string path = dir_ + "/discover.sh";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0755);
    return path;
  }

  // Runs `discovery` once, to its outcome, waiting on its descriptors.
  absl::StatusOr<std::vector<HostSlots>> RunOnce(HostDiscovery& discovery) {
    absl::StatusOr<UniqueFd> err = discovery.Start(HostDiscovery::Clock::now());
    if (!err.ok()) return err.status();
    const auto give_up = HostDiscovery::Clock::now() + std::chrono::seconds(30);
    while (HostDiscovery::Clock::now() < give_up) {
      if (auto result = discovery.Service(HostDiscovery::Clock::now())) return *result;
      std::vector<pollfd> fds;
      for (int fd : discovery.PollFds()) fds.push_back({.fd = fd, .events = POLLIN, .revents = 0});
      ::poll(fds.data(), fds.size(), 20);
    }
    return absl::DeadlineExceededError("the test gave up");
  }

  std::string dir_;
};

TEST_F(HostDiscoveryTest, ReadsTheHostsTheScriptPrints) {
  HostDiscovery discovery(Script("echo localhost:2; echo '# spare'; echo hostB"),
                          {"PATH=/bin:/usr/bin"}, "node1", absl::Seconds(10));
  absl::StatusOr<std::vector<HostSlots>> hosts = RunOnce(discovery);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre(HostSlots{"localhost", 2}, HostSlots{"hostB", 1}));
  EXPECT_FALSE(discovery.running());
  EXPECT_THAT(discovery.PollFds(), IsEmpty());
  // And again: each run starts afresh.
  hosts = RunOnce(discovery);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_EQ(hosts->size(), 2u);
}

TEST_F(HostDiscoveryTest, ScriptGetsItsEnvironment) {
  HostDiscovery discovery(Script("echo \"$HOSTS_FROM_ENV\""),
                          {"PATH=/bin:/usr/bin", "HOSTS_FROM_ENV=envhost:3"}, "node1",
                          absl::Seconds(10));
  absl::StatusOr<std::vector<HostSlots>> hosts = RunOnce(discovery);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre(HostSlots{"envhost", 3}));
}

TEST_F(HostDiscoveryTest, FailingScriptIsAnError) {
  const std::string script = Script("echo hostA:2; exit 3");
  HostDiscovery discovery(script, {"PATH=/bin:/usr/bin"}, "node1", absl::Seconds(10));
  absl::StatusOr<std::vector<HostSlots>> hosts = RunOnce(discovery);
  ASSERT_FALSE(hosts.ok());
  EXPECT_THAT(Message(hosts.status()),
              HasSubstr(absl::StrCat("host discovery `", script, "` exited with status 3")));
}

TEST_F(HostDiscoveryTest, BadOutputNamesTheScriptAndLine) {
  HostDiscovery discovery(Script("echo hostA:2; echo 'hostB:two'"), {"PATH=/bin:/usr/bin"}, "node1",
                          absl::Seconds(10));
  absl::StatusOr<std::vector<HostSlots>> hosts = RunOnce(discovery);
  ASSERT_FALSE(hosts.ok());
  EXPECT_THAT(Message(hosts.status()),
              HasSubstr("discover.sh`: discovery output line 2 \"hostB:two\": slots \"two\""));
}

TEST_F(HostDiscoveryTest, ScriptRunningTooLongIsKilled) {
  HostDiscovery discovery(Script("echo hostA:2; exec sleep 1000"), {"PATH=/bin:/usr/bin"}, "node1",
                          absl::Milliseconds(200));
  const auto start = HostDiscovery::Clock::now();
  absl::StatusOr<std::vector<HostSlots>> hosts = RunOnce(discovery);
  ASSERT_FALSE(hosts.ok());
  EXPECT_EQ(hosts.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(Message(hosts.status()), HasSubstr("ran longer than 200ms; killed it"));
  EXPECT_LT(HostDiscovery::Clock::now() - start, std::chrono::seconds(10));
  EXPECT_FALSE(discovery.running());
}

TEST_F(HostDiscoveryTest, TooMuchOutputIsAnError) {
  HostDiscovery discovery(Script("yes hostA:1 | head -c 2000000"), {"PATH=/bin:/usr/bin"}, "node1",
                          absl::Seconds(10));
  absl::StatusOr<std::vector<HostSlots>> hosts = RunOnce(discovery);
  ASSERT_FALSE(hosts.ok());
  EXPECT_THAT(Message(hosts.status()), HasSubstr("printed more than 1048576 bytes"));
}

TEST_F(HostDiscoveryTest, MissingScriptCannotStart) {
  HostDiscovery discovery(dir_ + "/absent.sh", {"PATH=/bin:/usr/bin"}, "node1", absl::Seconds(10));
  absl::StatusOr<UniqueFd> err = discovery.Start(HostDiscovery::Clock::now());
  ASSERT_FALSE(err.ok());
  EXPECT_THAT(Message(err.status()), HasSubstr("absent.sh"));
  EXPECT_FALSE(discovery.running());
}

TEST_F(HostDiscoveryTest, OneRunAtATime) {
  HostDiscovery discovery(Script("exec sleep 1000"), {"PATH=/bin:/usr/bin"}, "node1",
                          absl::Seconds(10));
  ASSERT_TRUE(discovery.Start(HostDiscovery::Clock::now()).ok());
  EXPECT_EQ(discovery.Start(HostDiscovery::Clock::now()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Destroying it kills the running script.
}

}  // namespace
}  // namespace kolo::kolorun
