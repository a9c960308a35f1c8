#include "daemon/status/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

// How long a test client waits for any one read or write. The server gives
// each connection at most 2 s, so this is ample yet keeps a hang bounded.
constexpr int kClientTimeoutSeconds = 10;

// A connected TCP client to 127.0.0.1:`port` with bounded I/O.
absl::StatusOr<UniqueFd> Connect(int port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return absl::InternalError(std::strerror(errno));
  timeval tv{kClientTimeoutSeconds, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(absl::StrCat("connect: ", std::strerror(errno)));
  }
  return fd;
}

// Reads until the server closes; DEADLINE_EXCEEDED if it stays silent.
absl::StatusOr<std::string> ReadToEnd(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return out;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::DeadlineExceededError(
            absl::StrCat("no answer within ", kClientTimeoutSeconds, " s"));
      }
      return absl::InternalError(std::strerror(errno));
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

// Sends `request` on a fresh connection and returns the whole response.
absl::StatusOr<std::string> Exchange(int port, const std::string& request) {
  auto fd = Connect(port);
  if (!fd.ok()) return fd.status();
  if (send(fd->get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return absl::InternalError("short send");
  }
  shutdown(fd->get(), SHUT_WR);
  return ReadToEnd(fd->get());
}

struct HttpResponse {
  std::string status_line;
  std::string headers;  // lines after the status line, CRLF-separated
  std::string body;
};

HttpResponse Parse(const std::string& raw) {
  HttpResponse r;
  size_t line_end = raw.find("\r\n");
  size_t head_end = raw.find("\r\n\r\n");
  if (line_end == std::string::npos || head_end == std::string::npos) {
    ADD_FAILURE() << "not an HTTP response: " << raw;
    return r;
  }
  r.status_line = raw.substr(0, line_end);
  r.headers = raw.substr(line_end + 2, head_end - line_end - 2);
  r.body = raw.substr(head_end + 4);
  return r;
}

class MetricsHttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = MetricsHttpServer::Start("127.0.0.1:0", [this] {
      renders_.fetch_add(1);
      return std::string("# HELP kolo_up Up.\n# TYPE kolo_up gauge\nkolo_up 1\n");
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_GT(server_->port(), 0);
  }

  std::atomic<int> renders_{0};
  std::unique_ptr<MetricsHttpServer> server_;
};

TEST_F(MetricsHttpServerTest, GetMetricsReturnsTheRenderedBodyAsPrometheusText) {
  auto raw = Exchange(server_->port(), "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  ASSERT_TRUE(raw.ok()) << raw.status();
  HttpResponse r = Parse(*raw);
  EXPECT_EQ(r.status_line, "HTTP/1.1 200 OK");
  EXPECT_TRUE(
      absl::StrContains(r.headers, "Content-Type: text/plain; version=0.0.4; charset=utf-8"))
      << r.headers;
  EXPECT_TRUE(absl::StrContains(r.headers, absl::StrCat("Content-Length: ", r.body.size())))
      << r.headers;
  EXPECT_EQ(r.body, "# HELP kolo_up Up.\n# TYPE kolo_up gauge\nkolo_up 1\n");
  EXPECT_EQ(renders_.load(), 1);

  // A query string is still /metrics, and each scrape renders afresh.
  raw = Exchange(server_->port(), "GET /metrics?x=1 HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(Parse(*raw).status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(renders_.load(), 2);
}

TEST_F(MetricsHttpServerTest, OtherPathIsNotFound) {
  auto raw = Exchange(server_->port(), "GET /other HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(Parse(*raw).status_line, "HTTP/1.1 404 Not Found");
  EXPECT_EQ(renders_.load(), 0);
}

TEST_F(MetricsHttpServerTest, PostIsMethodNotAllowed) {
  auto raw = Exchange(server_->port(), "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(Parse(*raw).status_line, "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(renders_.load(), 0);
}

TEST_F(MetricsHttpServerTest, GarbageIsBadRequest) {
  // The longest request the server reads, with no line end in it.
  const std::string oversized(8192, 'x');
  for (const std::string& request :
       {std::string("garbage\r\n\r\n"), std::string("no line end at all"), oversized}) {
    auto raw = Exchange(server_->port(), request);
    ASSERT_TRUE(raw.ok()) << raw.status();
    EXPECT_EQ(Parse(*raw).status_line, "HTTP/1.1 400 Bad Request")
        << "request of " << request.size() << " bytes";
  }
  EXPECT_EQ(renders_.load(), 0);
}

TEST_F(MetricsHttpServerTest, SilentClientDoesNotBlockTheNextOneForever) {
  // Connected and accepted first, this client never sends a byte.
  auto idle = Connect(server_->port());
  ASSERT_TRUE(idle.ok()) << idle.status();
  // The next client is served once the server gives up on the silent one
  // (its 2 s I/O timeout), well within this client's own 10 s limit.
  auto raw = Exchange(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(Parse(*raw).status_line, "HTTP/1.1 200 OK");
  // The silent client was answered and closed, not left hanging.
  auto idle_answer = ReadToEnd(idle->get());
  ASSERT_TRUE(idle_answer.ok()) << idle_answer.status();
  EXPECT_EQ(Parse(*idle_answer).status_line, "HTTP/1.1 400 Bad Request");
}

TEST_F(MetricsHttpServerTest, TricklingClientDoesNotHoldTheServerPastItsDeadline) {
  // This client sends a byte every 300 ms and never finishes its request:
  // each read succeeds, so only a deadline on the whole request, not one per
  // read, lets the server move on.
  auto slow = Connect(server_->port());
  ASSERT_TRUE(slow.ok()) << slow.status();
  ASSERT_EQ(send(slow->get(), "G", 1, MSG_NOSIGNAL), 1);
  absl::Notification stop;
  std::thread trickler([&] {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    // Pacing, not synchronisation: the wait ends early once told to stop.
    while (!stop.WaitForNotificationWithTimeout(absl::Milliseconds(300)) && absl::Now() < give_up) {
      if (send(slow->get(), "E", 1, MSG_NOSIGNAL) != 1) return;
    }
  });
  // Answered once the server gives up on the trickler (2 s), well within
  // this client's 10 s limit; without a whole-request deadline the server
  // would keep reading the trickle for minutes.
  auto raw = Exchange(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  stop.Notify();
  trickler.join();
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(Parse(*raw).status_line, "HTTP/1.1 200 OK");
}

TEST_F(MetricsHttpServerTest, DestructionStopsServingAndClosesTheListener) {
  const int port = server_->port();
  // A silent client is connected while the server is destroyed; destruction
  // still returns (the connection's I/O timeout bounds it).
  auto idle = Connect(port);
  ASSERT_TRUE(idle.ok()) << idle.status();
  server_.reset();
  auto after = Connect(port);
  EXPECT_FALSE(after.ok()) << "still accepting on port " << port;
}

TEST(MetricsHttpServerStartTest, RejectsAnAddressWithoutHost) {
  auto server = MetricsHttpServer::Start(":0", [] { return std::string(); });
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MetricsHttpServerStartTest, TwoServersOnPortZeroGetDifferentPorts) {
  auto a = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string(); });
  auto b = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string(); });
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE((*a)->port(), (*b)->port());
}

TEST(SplitHostPortTest, AcceptsHostAndPortAndBracketedIpv6) {
  std::string host, port;
  ASSERT_TRUE(SplitHostPort("127.0.0.1:80", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, "80");
  ASSERT_TRUE(SplitHostPort("[::1]:0", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, "0");
  ASSERT_TRUE(SplitHostPort("localhost:65535", &host, &port).ok());
  EXPECT_EQ(host, "localhost");
  EXPECT_EQ(port, "65535");
}

TEST(SplitHostPortTest, RejectsMissingHostMissingPortAndBadPorts) {
  for (const char* bad : {":80", "host", "host:", "h:99999", "h:x", "h:-1", ""}) {
    std::string host, port;
    absl::Status s = SplitHostPort(bad, &host, &port);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "\"" << bad << "\"";
    EXPECT_TRUE(absl::StrContains(s.message(), bad)) << s.message();
  }
}

}  // namespace
}  // namespace kolo::daemon
