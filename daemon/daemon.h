// Daemon: one running kolod — its gRPC servers (Node, Status and Admin on the
// Unix socket; Status and Admin on the status TCP address; health and
// reflection on both), job registry, CPU backend, worker pool, metrics,
// timeline and stall inspector. Everything but flag parsing and signal
// handling, so tests can run a real daemon in-process.
//
// Thread-safety: Start/Shutdown from one thread; the services are thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/config.h"
#include "daemon/transport/transport.h"

namespace grpc {
class Server;
}

namespace kolo::daemon {

class AdminService;
class CallGate;
class UnixListener;
class CoordinatorRegistry;
class ElasticLeaders;
class RendezvousCaller;
class PeerService;
class PeerCredentials;
class CpuBackend;
class DeviceBackendFactory;
class HandoffServer;
class HandoffTable;
class HealthService;
class JobRegistry;
class Metrics;
class MetricsHttpServer;
class NodeService;
class StallInspector;
class StatusService;
class Timeline;
class ViewerResolver;
class WorkerPool;
struct MultiNodeEnv;
struct NodeFacts;
struct StallPolicy;

inline constexpr char kVersion[] = "0.2.0";

class Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const DaemonConfig& config);
  ~Daemon();

  // Stops serving: ends every session (their jobs fail on the clients with
  // UNAVAILABLE) and removes the socket. Idempotent.
  void Shutdown();
  // Blocks until Shutdown.
  void Wait();

  // host:port of the status listener ("" if disabled), after binding.
  const std::string& status_address() const { return status_address_; }
  // host:port of the peer listener ("" if disabled), after binding.
  const std::string& peer_address() const { return peer_address_; }
  int metrics_port() const;
  // Jobs this daemon has now (JobRegistry::size).
  int job_count() const;

 private:
  explicit Daemon(const DaemonConfig& config);
  // The steps of Start (see daemon.cc).
  static std::string AdminTokenFile(const DaemonConfig& config);
  // Metrics, timeline, worker pool, backends, transports; returns the
  // number of workers.
  int MakeJobResources();
  // Serves the Peer service when a peer address is set, and fills in what
  // multi-node jobs need of this daemon.
  absl::Status StartPeerService(MultiNodeEnv* multi_node);
  // How the Peer plane runs (ResolvePeerPlane), logged; null when it is off.
  absl::StatusOr<std::shared_ptr<const PeerCredentials>> PeerPlaneCredentials() const;
  absl::Status MakeServices(const MultiNodeEnv& multi_node, const StallPolicy& stall_policy);
  NodeFacts Facts(int workers, const std::string& token_file, const std::string& node_name) const;
  absl::Status StartServers();
  // The steps of StartServers: Node, Status, Admin on the socket (accepted
  // by UnixListener, each call counted by CallGate), and Status and Admin on
  // the status TCP address.
  absl::Status StartUnixServer();
  absl::Status StartStatusTcpServer();
  // Gives the socket file at `path` the configured mode and group.
  absl::Status ApplySocketAccess(const std::string& path) const;

  DaemonConfig config_;
  std::string admin_token_;
  std::string status_address_;
  std::string peer_address_;
  std::unique_ptr<CoordinatorRegistry> coordinators_;
  // Elastic jobs across nodes: the membership leaders this daemon runs and
  // how it reaches another daemon's (both outlive the registry's jobs).
  std::unique_ptr<ElasticLeaders> elastic_leaders_;
  std::unique_ptr<RendezvousCaller> rendezvous_;
  std::unique_ptr<PeerService> peer_service_;
  std::unique_ptr<grpc::Server> peer_server_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Timeline> timeline_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<DeviceBackendFactory> device_backends_;
  std::unique_ptr<TransportFactory> transports_;  // between the nodes of a job
  std::unique_ptr<HandoffTable> handoffs_;
  std::unique_ptr<ViewerResolver> viewers_;
  std::unique_ptr<JobRegistry> registry_;
  std::unique_ptr<NodeService> node_service_;
  std::unique_ptr<StatusService> status_service_;
  std::unique_ptr<AdminService> admin_service_;
  // grpc.health.v1 on the socket and on the status port (a service serves
  // one server).
  std::unique_ptr<HealthService> health_unix_;
  std::unique_ptr<HealthService> health_tcp_;
  std::unique_ptr<StallInspector> stall_inspector_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  // What each caller may hold on the socket and on the status port.
  std::unique_ptr<CallGate> unix_gate_;
  std::unique_ptr<CallGate> tcp_gate_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> tcp_server_;
  // Accepts on the socket and hands connections to server_ (stopped first).
  std::unique_ptr<UnixListener> unix_listener_;
  std::unique_ptr<HandoffServer> handoff_server_;
  bool shut_down_ = false;
};

// Reads the admin token from `path`, or creates it (mode 0600) with a fresh
// random token when the file does not exist.
absl::StatusOr<std::string> LoadOrCreateAdminToken(const std::string& path);

}  // namespace kolo::daemon
