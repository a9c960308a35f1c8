// Daemon: one running kolod — its gRPC server on the Unix socket (Node,
// Status, health and reflection), job registry, CPU backend and worker pool.
// Everything but flag parsing and signal handling, so tests can run a real
// daemon in-process.
//
// Thread-safety: Start/Shutdown from one thread; the services are thread-safe.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/config.h"

namespace grpc {
class Server;
}

namespace kolo::daemon {

class WorkerPool;
class CpuBackend;
class JobRegistry;
class NodeService;
class StatusService;

inline constexpr char kVersion[] = "0.1.0";

class Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const DaemonConfig& config);
  ~Daemon();

  // Stops serving: ends every session (their jobs fail on the clients with
  // UNAVAILABLE) and removes the socket. Idempotent.
  void Shutdown();
  // Blocks until Shutdown.
  void Wait();

 private:
  explicit Daemon(const DaemonConfig& config);

  DaemonConfig config_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<JobRegistry> registry_;
  std::unique_ptr<NodeService> node_service_;
  std::unique_ptr<StatusService> status_service_;
  std::unique_ptr<grpc::Server> server_;
  bool shut_down_ = false;
};

}  // namespace kolo::daemon
