#include "common/sd_notify.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/random_id.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"

namespace kolo {
namespace {

// Saves NOTIFY_SOCKET before each test and puts it back afterwards, so tests
// neither see nor leak each other's setting.
class SdNotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* v = getenv("NOTIFY_SOCKET")) saved_ = std::string(v);
  }
  void TearDown() override {
    if (saved_) {
      setenv("NOTIFY_SOCKET", saved_->c_str(), 1);
    } else {
      unsetenv("NOTIFY_SOCKET");
    }
    if (!dir_.empty()) {
      if (!path_.empty()) unlink(path_.c_str());
      rmdir(dir_.c_str());
    }
  }

  // Binds a datagram socket at a fresh path under /tmp (the test tmpdir can
  // exceed the 107 bytes sockaddr_un allows) and returns it.
  UniqueFd BindPathSocket() {
    char tmpl[] = "/tmp/kolo_sd_notify_XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr) << std::strerror(errno);
    dir_ = tmpl;
    path_ = dir_ + "/notify.sock";
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    UniqueFd fd(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    EXPECT_TRUE(fd.valid()) << std::strerror(errno);
    EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << std::strerror(errno);
    return fd;
  }

  std::optional<std::string> saved_;
  std::string dir_;
  std::string path_;
};

// The datagram is queued on the receiver before sendto returns, so a
// non-blocking receive right after NotifyServiceManager needs no waiting.
std::string ReceiveNow(int fd) {
  char buf[4096];
  ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  if (n < 0) return absl::StrCat("<recv failed: ", std::strerror(errno), ">");
  return std::string(buf, static_cast<size_t>(n));
}

TEST_F(SdNotifyTest, SendsStateToPathSocket) {
  UniqueFd receiver = BindPathSocket();
  ASSERT_EQ(setenv("NOTIFY_SOCKET", path_.c_str(), 1), 0);

  ASSERT_TRUE(NotifyServiceManager("READY=1").ok());
  EXPECT_EQ(ReceiveNow(receiver.get()), "READY=1");

  ASSERT_TRUE(NotifyServiceManager("STATUS=serving 2 jobs\nREADY=1").ok());
  EXPECT_EQ(ReceiveNow(receiver.get()), "STATUS=serving 2 jobs\nREADY=1");

  ASSERT_TRUE(NotifyServiceManager("STOPPING=1").ok());
  EXPECT_EQ(ReceiveNow(receiver.get()), "STOPPING=1");
}

TEST_F(SdNotifyTest, SendsStateToAbstractSocket) {
  const std::string name = absl::StrCat("kolo-sd-notify-test-", getpid(), "-", RandomHex(8));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  addr.sun_path[0] = '\0';
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  UniqueFd receiver(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(receiver.valid());
  ASSERT_EQ(bind(receiver.get(), reinterpret_cast<sockaddr*>(&addr), len), 0)
      << std::strerror(errno);
  const std::string env = "@" + name;
  ASSERT_EQ(setenv("NOTIFY_SOCKET", env.c_str(), 1), 0);

  absl::Status s = NotifyServiceManager("READY=1");
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ReceiveNow(receiver.get()), "READY=1");
}

TEST_F(SdNotifyTest, UnsetOrEmptyIsANoOp) {
  ASSERT_EQ(unsetenv("NOTIFY_SOCKET"), 0);
  EXPECT_TRUE(NotifyServiceManager("READY=1").ok());
  ASSERT_EQ(setenv("NOTIFY_SOCKET", "", 1), 0);
  EXPECT_TRUE(NotifyServiceManager("READY=1").ok());
}

TEST_F(SdNotifyTest, RejectsUnusableAddresses) {
  EXPECT_EQ(NotifyServiceManagerAt("relative/notify.sock", "READY=1").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NotifyServiceManagerAt("vsock:2:1234", "READY=1").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NotifyServiceManagerAt("/" + std::string(200, 'x'), "READY=1").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NotifyServiceManagerAt("@", "READY=1").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SdNotifyTest, MissingSocketIsAnErrorNamingIt) {
  char tmpl[] = "/tmp/kolo_sd_notify_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  dir_ = tmpl;
  const std::string missing = dir_ + "/absent.sock";
  absl::Status s = NotifyServiceManagerAt(missing, "READY=1");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find(missing), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace kolo
