// Test fixtures shared by kolorun's launcher tests: scratch directories, a
// socket that looks like a running kolod, captured output, and the fixtures
// that build LaunchOptions for jobs of shell-command ranks (on this machine,
// and across hosts with the fake ssh of testdata/).
//
// Thread-safety: test code, used from the test's thread.
#pragma once

#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/kolorun/launcher.h"
#include "client/kolorun/subprocess.h"
#include "gtest/gtest.h"

namespace kolo::kolorun {

inline std::string TestTmpDir() {
  const char* dir = ::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

inline std::string TestData(const std::string& name) {
  const char* srcdir = ::getenv("TEST_SRCDIR");
  const char* workspace = ::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) {
    return absl::StrCat("client/kolorun/testdata/", name);
  }
  return absl::StrCat(srcdir, "/", workspace, "/client/kolorun/testdata/", name);
}

inline std::string FakeKolod() { return TestData("fake_kolod.py"); }
inline std::string FakeSsh() { return TestData("fake_ssh.sh"); }

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory under /tmp (short enough for socket paths), removed at
// the end.
class ShortTempDir {
 public:
  ShortTempDir() {
    std::string templ = "/tmp/kolorun_test.XXXXXX";
    EXPECT_NE(::mkdtemp(templ.data()), nullptr);
    path_ = templ;
  }
  ~ShortTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A Unix socket that accepts connections (into its backlog): what a running
// kolod looks like to kolorun's probe.
class ListeningSocket {
 public:
  ListeningSocket() : path_(dir_.path() + "/kolod.sock") {
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path_.copy(addr.sun_path, path_.size());
    EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd_.get(), 128), 0);
  }
  const std::string& path() const { return path_; }

 private:
  ShortTempDir dir_;
  std::string path_;
  UniqueFd fd_;
};

// An in-memory file that stands in for kolorun's stdout or stderr.
class CapturedOutput {
 public:
  CapturedOutput() : fd_(::memfd_create("kolorun_test_output", MFD_CLOEXEC)) {}
  int fd() const { return fd_.get(); }
  std::string Contents() const {
    std::string out;
    char buf[4096];
    off_t offset = 0;
    ssize_t n;
    while ((n = ::pread(fd_.get(), buf, sizeof(buf), offset)) > 0) {
      out.append(buf, static_cast<size_t>(n));
      offset += n;
    }
    return out;
  }
  std::vector<std::string> Lines() const {
    std::vector<std::string> lines = absl::StrSplit(Contents(), '\n');
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    return lines;
  }

 private:
  UniqueFd fd_;
};

class LauncherTest : public ::testing::Test {
 protected:
  LaunchOptions Options(int num_ranks, const std::string& script) {
    LaunchOptions o;
    o.num_ranks = num_ranks;
    o.command = {"/bin/sh", "-c", script};
    o.base_env = {"PATH=/bin:/usr/bin", "FOO=bar", "KOLO_RANK=stale", "KOLO_STALL_WARNING_S=7",
                  absl::StrCat("DIR=", dir_.path())};
    o.socket_path = daemon_.path();
    o.kolod.flag_path = FakeKolod();
    o.temp_root = TestTmpDir();
    o.stdout_fd = out_.fd();
    o.stderr_fd = err_.fd();
    o.grace = absl::Seconds(30);
    o.kill_grace = absl::Seconds(30);
    return o;
  }

  ShortTempDir dir_;        // Scratch space the ranks can see as $DIR.
  ListeningSocket daemon_;  // A "running kolod" by default.
  CapturedOutput out_;
  CapturedOutput err_;
};

// The fake ssh (testdata/fake_ssh.sh) records its argv in $FAKE_SSH_LOG_DIR
// and runs the remote command here through sh -c in an environment holding
// only PATH, as sshd would on another host.
class MultiHostTest : public LauncherTest {
 protected:
  static constexpr char kThisHost[] = "kolo-test-node";

  MultiHostTest() : log_dir_(dir_.path() + "/ssh_log") {
    std::filesystem::create_directory(log_dir_);
  }

  LaunchOptions HostOptions(int num_ranks, std::vector<HostSlots> hosts,
                            const std::string& script) {
    LaunchOptions o = Options(num_ranks, script);
    o.base_env.push_back("FAKE_SSH_LOG_DIR=" + log_dir_);
    o.hosts = std::move(hosts);
    o.this_host = kThisHost;
    o.ssh_program = FakeSsh();
    o.ssh_args = {"-p", "2222"};
    o.remote_socket_path = "/run/kolo/remote test.sock";
    return o;
  }

  // The argv of every ssh started, in no particular order.
  std::vector<std::vector<std::string>> SshCalls() const {
    std::vector<std::vector<std::string>> calls;
    for (const auto& entry : std::filesystem::directory_iterator(log_dir_)) {
      std::vector<std::string> argv = absl::StrSplit(ReadFile(entry.path().string()), '\0');
      if (!argv.empty() && argv.back().empty()) argv.pop_back();
      calls.push_back(std::move(argv));
    }
    return calls;
  }

  const std::string log_dir_;
};

}  // namespace kolo::kolorun
