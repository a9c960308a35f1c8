// MetricsHttpServer: serves GET /metrics (Prometheus text exposition) over
// plain HTTP/1.1 on one TCP address, one short connection at a time. Requests
// are bounded in size and time, so a slow or hostile scraper cannot hold it.
//
// Thread-safety: thread-safe; its own thread serves, the destructor stops it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace kolo::daemon {

class MetricsHttpServer {
 public:
  // `address` is HOST:PORT (port 0 picks one). `render` produces the body.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, std::function<std::string()> render);
  ~MetricsHttpServer();

  int port() const { return port_; }

 private:
  MetricsHttpServer(UniqueFd listener, UniqueFd wake, int port,
                    std::function<std::string()> render);
  void Loop();
  void Serve(int fd);

  UniqueFd listener_;
  UniqueFd wake_;  // eventfd that stops Loop
  int port_;
  std::function<std::string()> render_;
  std::thread thread_;
};

// Splits "host:port" (or "[v6]:port"); INVALID_ARGUMENT names the problem.
absl::Status SplitHostPort(const std::string& address, std::string* host, std::string* port);

}  // namespace kolo::daemon
