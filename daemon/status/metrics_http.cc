#include "daemon/status/metrics_http.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/errno_status.h"
#include "common/start_thread.h"

namespace kolo::daemon {
namespace {

constexpr size_t kMaxRequestBytes = 8192;
constexpr int kIoTimeoutMs = 2000;

void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    off += static_cast<size_t>(n);
  }
}

std::string HttpResponse(int code, const char* reason, const char* type, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::Status SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" is not HOST:PORT"));
  }
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  int p = 0;
  if (!absl::SimpleAtoi(*port, &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\": bad port"));
  }
  if (host->empty()) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address,
                                                   "\": give a host (e.g. 127.0.0.1) so it is "
                                                   "never bound to every interface by accident"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, std::function<std::string()> render) {
  std::string host, port;
  if (absl::Status s = SplitHostPort(address, &host, &port); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address ", address, ": ", gai_strerror(rc)));
  }
  UniqueFd fd(socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  if (fd.valid()) setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  bool bound =
      fd.valid() && bind(fd.get(), res->ai_addr, res->ai_addrlen) == 0 && listen(fd.get(), 16) == 0;
  int err = errno;
  freeaddrinfo(res);
  if (!bound) return ErrnoToStatus(err, absl::StrCat("listen on ", address));
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  int bound_port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                            : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return ErrnoToStatus(errno, "eventfd");
  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(std::move(fd), std::move(wake), bound_port, std::move(render)));
  absl::StatusOr<std::thread> thread =
      StartThread("the metrics endpoint", "kolo-metrics", [s = server.get()] { s->Loop(); });
  if (!thread.ok()) return thread.status();
  server->thread_ = std::move(*thread);
  return server;
}

MetricsHttpServer::MetricsHttpServer(UniqueFd listener, UniqueFd wake, int port,
                                     std::function<std::string()> render)
    : listener_(std::move(listener)),
      wake_(std::move(wake)),
      port_(port),
      render_(std::move(render)) {}

MetricsHttpServer::~MetricsHttpServer() {
  uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

void MetricsHttpServer::Loop() {
  for (;;) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents & POLLIN) {
      UniqueFd conn(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (conn.valid()) Serve(conn.get());
    }
  }
}

void MetricsHttpServer::Serve(int fd) {
  timeval tv{kIoTimeoutMs / 1000, (kIoTimeoutMs % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string request;
  char buf[1024];
  // One deadline for the whole request: the receive timeout bounds each read
  // only, so a client trickling a byte at a time would otherwise hold the
  // server for as long as it likes.
  const absl::Time deadline = absl::Now() + absl::Milliseconds(kIoTimeoutMs);
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequestBytes) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) break;
    pollfd pfd{fd, POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(left_ms));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    request.append(buf, static_cast<size_t>(n));
  }
  size_t line_end = request.find("\r\n");
  if (line_end == std::string::npos) {
    WriteAll(fd, HttpResponse(400, "Bad Request", "text/plain", "bad request\n"));
    return;
  }
  std::string line = request.substr(0, line_end);
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos) {
    WriteAll(fd, HttpResponse(400, "Bad Request", "text/plain", "bad request\n"));
    return;
  }
  std::string method = line.substr(0, sp1);
  std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (method != "GET") {
    WriteAll(fd, HttpResponse(405, "Method Not Allowed", "text/plain", "GET only\n"));
  } else if (path == "/metrics" || path.rfind("/metrics?", 0) == 0) {
    WriteAll(fd, HttpResponse(200, "OK", "text/plain; version=0.0.4; charset=utf-8", render_()));
  } else if (path == "/") {
    WriteAll(fd, HttpResponse(200, "OK", "text/plain", "kolod: metrics are at /metrics\n"));
  } else {
    WriteAll(fd, HttpResponse(404, "Not Found", "text/plain", "not found\n"));
  }
}

}  // namespace kolo::daemon
