#include "daemon/daemon.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_posix.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/handoff.h"
#include "common/publish_file.h"
#include "common/random_id.h"
#include "common/sd_notify.h"
#include "common/unique_fd.h"
#include "daemon/backend/cpu/cpu_backend.h"
#include "daemon/backend/cpu/worker_pool.h"
#include "daemon/backend/device_backend.h"
#include "daemon/core/caller_memory.h"
#include "daemon/elastic/elastic_leader.h"
#include "daemon/job/default_negotiators.h"
#include "daemon/job/job_registry.h"
#include "daemon/job/rendezvous_client.h"
#include "daemon/observe/metrics.h"
#include "daemon/observe/timeline.h"
#include "daemon/session/call_gate.h"
#include "daemon/session/handoff_server.h"
#include "daemon/session/handoff_table.h"
#include "daemon/session/node_service.h"
#include "daemon/session/unix_listener.h"
#include "daemon/status/admin_service.h"
#include "daemon/status/call_credentials.h"
#include "daemon/status/health_service.h"
#include "daemon/status/metrics_http.h"
#include "daemon/status/stall_inspector.h"
#include "daemon/status/status_service.h"
#include "daemon/status/viewer.h"
#include "daemon/transport/ucx_transport.h"
#include "daemon/wire/member_link.h"
#include "daemon/wire/peer_service.h"
#include "daemon/wire/peer_tls.h"
#include "proto/kolo/v1/node.grpc.pb.h"
#include "proto/kolo/v1/status.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

// One Peer.Rendezvous call (the leader answers within half a second).
constexpr absl::Duration kRendezvousDeadline = absl::Seconds(5);
// Attaches in progress and status calls that may run beside the sessions.
constexpr int kAttachHeadroomThreads = 128;
// Calls and connections one uid may hold on the socket beyond its sessions
// (attaches in progress, status calls, koloctl).
constexpr int kHeadroomPerUid = 64;
// The status port: its threads, the calls it admits in all, and the calls
// without credentials of all source addresses together (what is left is
// kept for calls with the admin token).
constexpr int kStatusThreads = 128;
constexpr int kStatusCalls = 96;
constexpr int kStatusAnonymousCalls = 64;
// Status-port connections: how long one may sit without a call, how long
// one lives (then it is closed gracefully; clients reconnect), and how
// often a silent peer is pinged to learn that it is gone.
constexpr int kStatusIdleMs = 60 * 1000;
constexpr int kStatusMaxAgeMs = 30 * 60 * 1000;
constexpr int kStatusAgeGraceMs = 30 * 1000;
constexpr int kStatusKeepaliveMs = 60 * 1000;
constexpr int kStatusKeepaliveTimeoutMs = 20 * 1000;

int ClampedMilliseconds(absl::Duration d) {
  return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, INT32_MAX));
}

// A leftover socket file from a daemon that died is removed; a live one is
// an error, so two daemons never share a path.
absl::Status ClaimSocketPath(const std::string& path) {
  if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path must be 1 to ", sizeof(sockaddr_un::sun_path) - 1, " bytes: ", path));
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a socket"));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.valid() && connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    return absl::AlreadyExistsError(absl::StrCat("another kolod is serving ", path));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoToStatus(errno, absl::StrCat("remove stale socket ", path));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// Reads a token file; NotFound when there is none.
absl::StatusOr<std::string> ReadAdminToken(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no admin token file ", path));
    return ErrnoToStatus(errno, absl::StrCat("open ", path));
  }
  char buf[512];
  ssize_t n = read(fd.get(), buf, sizeof(buf));
  if (n < 0) return ErrnoToStatus(errno, absl::StrCat("read ", path));
  if (n == 0) {
    return absl::FailedPreconditionError(absl::StrCat("admin token file ", path, " is empty"));
  }
  std::string token(absl::StripAsciiWhitespace(absl::string_view(buf, n)));
  if (token.size() < 16) {
    return absl::FailedPreconditionError(
        absl::StrCat("admin token in ", path, " is shorter than 16 characters"));
  }
  return token;
}

}  // namespace

// Daemons started side by side may share one token path (two kolods with
// sockets in one directory): the token is published whole (PublishFileOnce),
// so a reader never sees a half-written file, and the daemon that loses the
// race reads the winner's token.
absl::StatusOr<std::string> LoadOrCreateAdminToken(const std::string& path) {
  auto existing = ReadAdminToken(path);
  if (!absl::IsNotFound(existing.status())) return existing;
  const std::string token = RandomHex(24);
  absl::StatusOr<bool> created = PublishFileOnce(path, token + "\n");
  if (!created.ok()) return created.status();
  return *created ? token : ReadAdminToken(path);
}

Daemon::Daemon(const DaemonConfig& config) : config_(config) {}

// Start-up, in order:
//   1. claim the socket path and load (or make) the admin token;
//   2. make what jobs use: metrics, timeline, worker pool, backends,
//      transports;
//   3. serve the Peer service (when a peer address is set), so this daemon
//      can coordinate the multi-node jobs whose rank 0 it hosts;
//   4. the job registry and the services over it (Node, Admin, stall
//      inspector, metrics HTTP, Status);
//   5. serve gRPC, then tell the service manager we are ready.
absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const DaemonConfig& config) {
  for (const std::string& path : {config.socket_path, HandoffSocketPath(config.socket_path)}) {
    if (absl::Status s = ClaimSocketPath(path); !s.ok()) return s;
  }
  std::unique_ptr<Daemon> d(new Daemon(config));
  const std::string token_file = AdminTokenFile(config);
  auto token = LoadOrCreateAdminToken(token_file);
  if (!token.ok()) return token.status();
  d->admin_token_ = *token;
  const int workers = d->MakeJobResources();
  MultiNodeEnv multi_node;
  multi_node.transports = d->transports_.get();
  if (absl::Status s = d->StartPeerService(&multi_node); !s.ok()) return s;
  const StallPolicy stall_policy{config.stall_warning, config.stall_timeout};
  if (absl::Status s = d->MakeServices(multi_node, stall_policy); !s.ok()) return s;
  NodeFacts facts = d->Facts(workers, token_file, multi_node.node_name);
  StatusSources sources;
  sources.registry = d->registry_.get();
  sources.metrics = d->metrics_.get();
  sources.timeline = d->timeline_.get();
  sources.stall_policy = stall_policy;
  sources.sessions = [node = d->node_service_.get()] { return node->sessions(); };
  d->viewers_ = std::make_unique<ViewerResolver>(d->admin_token_, d->handoffs_.get());
  sources.viewers = d->viewers_.get();
  d->status_service_ = std::make_unique<StatusService>(sources, facts);
  if (absl::Status s = d->StartServers(); !s.ok()) return s;
  d->status_service_->set_status_address(d->status_address_);

  spdlog::info(
      "kolod {} serving on {} (status {}, peer {}, metrics {}, fusion threshold {} bytes, "
      "{} workers, stall warning {} s)",
      kVersion, config.socket_path, d->status_address_.empty() ? "off" : d->status_address_,
      d->peer_address_.empty() ? "off" : d->peer_address_,
      d->metrics_http_ ? absl::StrCat("port ", d->metrics_port(), " /metrics") : "off",
      config.fusion_threshold_bytes, workers + 1, absl::ToDoubleSeconds(config.stall_warning));
  (void)NotifyServiceManager("READY=1");
  return d;
}

std::string Daemon::AdminTokenFile(const DaemonConfig& config) {
  if (!config.admin_token_file.empty()) return config.admin_token_file;
  size_t slash = config.socket_path.rfind('/');
  return (slash == std::string::npos ? std::string(".") : config.socket_path.substr(0, slash)) +
         "/admin.token";
}

int Daemon::MakeJobResources() {
  const int workers = config_.worker_threads > 0
                          ? config_.worker_threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1);
  metrics_ = std::make_unique<Metrics>();
  timeline_ = std::make_unique<Timeline>();
  pool_ = std::make_unique<WorkerPool>(workers);
  if (!pool_->start_error().ok()) {
    spdlog::warn("the CPU worker pool runs {} of {} helper threads: {}", pool_->threads(), workers,
                 pool_->start_error().ToString());
  }
  backend_ = std::make_unique<CpuBackend>(pool_.get());
  device_backends_ = MakeDeviceBackendFactory(
      DeviceBackendLimits{config_.nccl_init_timeout, config_.nccl_timeout});
  UcxOptions ucx;
  ucx.stall_timeout = config_.transfer_timeout;
  transports_ = MakeUcxTransportFactory(ucx);
  return workers;
}

absl::StatusOr<std::shared_ptr<const PeerCredentials>> Daemon::PeerPlaneCredentials() const {
  absl::StatusOr<PeerPlane> plane = ResolvePeerPlane(config_);
  if (!plane.ok()) return plane.status();
  switch (*plane) {
    case PeerPlane::kOff:
      spdlog::info(
          "the Peer plane is off: jobs spanning nodes cannot run here (give --peer_address and "
          "--peer_tls_ca, --peer_tls_cert, --peer_tls_key, or --peer_plaintext)");
      return std::shared_ptr<const PeerCredentials>();
    case PeerPlane::kPlaintext:
      spdlog::warn(
          "--peer_plaintext: the Peer plane on {} is NOT encrypted or authenticated; anyone who "
          "reaches it can read job tokens and plans",
          config_.peer_address);
      return std::make_shared<const PeerCredentials>(PeerCredentials::Plaintext());
    case PeerPlane::kTls: {
      absl::StatusOr<PeerCredentials> tls = PeerCredentials::Tls(
          PeerTlsFiles{config_.peer_tls_ca, config_.peer_tls_cert, config_.peer_tls_key});
      if (!tls.ok()) return tls.status();
      return std::make_shared<const PeerCredentials>(*std::move(tls));
    }
  }
  return absl::InternalError("unknown Peer plane mode");
}

absl::Status Daemon::StartPeerService(MultiNodeEnv* multi_node) {
  absl::StatusOr<std::shared_ptr<const PeerCredentials>> credentials = PeerPlaneCredentials();
  if (!credentials.ok()) return credentials.status();
  if (*credentials == nullptr) return absl::OkStatus();
  std::string host, port;
  if (absl::Status s = SplitHostPort(config_.peer_address, &host, &port); !s.ok()) return s;
  CoordinatorOptions coordinator_options;
  coordinator_options.fusion_threshold_bytes = config_.fusion_threshold_bytes;
  coordinator_options.cache_capacity = config_.response_cache_capacity;
  coordinator_options.direct_ready = config_.direct_ready;
  coordinator_options.new_device_comm_id = [f = device_backends_.get()] { return f->NewCommId(); };
  auto coordinators =
      CoordinatorRegistry::Start(coordinator_options, absl::Seconds(1), config_.peer_timeout);
  if (!coordinators.ok()) return coordinators.status();
  coordinators_ = std::move(*coordinators);
  auto rendezvous =
      std::make_unique<GrpcRendezvous>((*credentials)->Channel(), kRendezvousDeadline);
  ElasticLeaderOptions leader_options;
  leader_options.lost_after = config_.peer_timeout;
  leader_options.refuses = [r = rendezvous.get()](const std::string& address) {
    return r->Refuses(address);
  };
  elastic_leaders_ = std::make_unique<ElasticLeaders>(leader_options);
  rendezvous_ = std::move(rendezvous);
  const PeerServiceLimits peer_limits;
  peer_service_ =
      std::make_unique<PeerService>(coordinators_.get(), peer_limits, elastic_leaders_.get());
  int selected = 0;
  grpc::ServerBuilder peer;
  peer.AddListeningPort(config_.peer_address, (*credentials)->Server(), &selected);
  ConfigurePeerServer(peer_limits, &peer);
  peer.RegisterService(peer_service_.get());
  peer_server_ = peer.BuildAndStart();
  if (peer_server_ == nullptr || selected == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve the peer service on ", config_.peer_address,
        (*credentials)->tls() ? " (in use? or --peer_tls_cert and --peer_tls_key do not match?"
                              : " (in use?",
        " set --peer_address, or empty to disable multi-node jobs)"));
  }
  peer_address_ = absl::StrCat(host, ":", selected);
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  multi_node->node_name =
      config_.node_name.empty() ? absl::StrCat(hostname, ":", selected) : config_.node_name;
  // Where the other daemons of an elastic job reach this one: a wildcard
  // listening address is reached by the host's name.
  const bool wildcard = host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::";
  multi_node->peer_address = wildcard ? absl::StrCat(hostname, ":", selected) : peer_address_;
  multi_node->rendezvous = rendezvous_.get();
  multi_node->elastic_leaders = elastic_leaders_.get();
  multi_node->coordinators = coordinators_.get();
  multi_node->peer_timeout = config_.peer_timeout;
  multi_node->peer_credentials = *std::move(credentials);
  return absl::OkStatus();
}

absl::Status Daemon::MakeServices(const MultiNodeEnv& multi_node, const StallPolicy& stall_policy) {
  JobObservers observers;
  observers.metrics = metrics_.get();
  observers.timeline = timeline_.get();
  JobLimits job_limits;
  job_limits.max_pending_per_rank = config_.max_pending_per_rank;
  job_limits.max_cache_capacity = config_.response_cache_capacity;
  ElasticLimits elastic_limits;
  elastic_limits.timeout = config_.elastic_timeout;
  elastic_limits.rejoin_grace = config_.elastic_rejoin_grace;
  registry_ = std::make_unique<JobRegistry>(backend_.get(), config_.fusion_threshold_bytes,
                                            DefaultNegotiators(), observers, multi_node,
                                            device_backends_.get(), job_limits, elastic_limits);
  HandoffLimits handoff_limits;
  handoff_limits.ttl = config_.attach_timeout;
  handoff_limits.max_waiting = config_.max_sessions;
  handoff_limits.max_waiting_per_uid = config_.max_sessions_per_uid;
  handoffs_ = std::make_unique<HandoffTable>(handoff_limits);
  NodeServiceOptions node_options;
  node_options.policy.max_job_ranks = config_.max_job_ranks;
  node_options.policy.max_sessions = config_.max_sessions;
  node_options.policy.max_sessions_per_uid = config_.max_sessions_per_uid;
  node_options.policy.attach_timeout = config_.attach_timeout;
  node_options.policy.allow_weak_job_tokens = config_.allow_weak_job_tokens;
  node_options.caller_memory = config_.caller_memory;
  node_options.caller_memory_uid = getuid();
  if (config_.caller_memory) {
    if (absl::Status allowed = CallerMemory::DaemonPrivilegesAllow(); !allowed.ok()) {
      spdlog::warn("--caller_memory: {}", std::string(allowed.message()));
      node_options.caller_memory = false;
    }
  }
  node_options.limits.spin = config_.spin;
  node_options.limits.max_segment_bytes = config_.max_segment_bytes;
  node_options.version = kVersion;
  node_service_ = std::make_unique<NodeService>(registry_.get(), handoffs_.get(), node_options);
  NodeService* node = node_service_.get();
  JobRegistry* registry = registry_.get();
  metrics_->SetGauges([node] { return node->sessions(); }, [registry] { return registry->size(); });
  auto stall_inspector = StallInspector::Start(registry_.get(), metrics_.get(), stall_policy);
  if (!stall_inspector.ok()) return stall_inspector.status();
  stall_inspector_ = std::move(*stall_inspector);
  admin_service_ = std::make_unique<AdminService>(registry_.get(), admin_token_);
  if (config_.metrics_address.empty()) return absl::OkStatus();
  const Metrics* metrics = metrics_.get();
  auto http =
      MetricsHttpServer::Start(config_.metrics_address, [metrics] { return metrics->Render(); });
  if (!http.ok()) return http.status();
  metrics_http_ = std::move(*http);
  return absl::OkStatus();
}

NodeFacts Daemon::Facts(int workers, const std::string& token_file,
                        const std::string& node_name) const {
  const DaemonConfig& config = config_;
  NodeFacts facts;
  facts.version = kVersion;
  facts.socket_path = config.socket_path;
  facts.fusion_threshold_bytes = config.fusion_threshold_bytes;
  facts.worker_threads = workers + 1;
  facts.started = absl::Now();
  facts.metrics_port = metrics_port();
  facts.devices.push_back(
      absl::StrCat("cpu: ", std::thread::hardware_concurrency(), " cores, shared-memory backend"));
  facts.config = {
      {"socket", config.socket_path},
      {"socket_mode", absl::StrFormat("%04o", config.socket_mode)},
      {"socket_group", config.socket_group},
      {"fusion_threshold", absl::StrCat(config.fusion_threshold_bytes)},
      {"workers", absl::StrCat(workers)},
      {"spin_us", absl::StrCat(absl::ToInt64Microseconds(config.spin))},
      {"status_address", config.status_address},
      {"metrics_address", config.metrics_address},
      {"admin_token_file", token_file},
      {"stall_warning_s", absl::StrCat(absl::ToDoubleSeconds(config.stall_warning))},
      {"stall_timeout_s", absl::StrCat(absl::ToDoubleSeconds(config.stall_timeout))},
      {"peer_address", peer_address_},
      {"peer_tls", config.peer_address.empty() || peer_address_.empty()
                       ? "off"
                       : (config.peer_plaintext ? "plaintext" : "mutual TLS")},
      {"node_name", node_name},
      {"peer_timeout_s", absl::StrCat(absl::ToDoubleSeconds(config.peer_timeout))},
      {"log_level", config.log_level},
  };
  return facts;
}

absl::Status Daemon::StartServers() {
  // The handoff socket first: a client that sees the gRPC socket can hand
  // off at once.
  HandoffServerOptions handoff;
  handoff.path = HandoffSocketPath(config_.socket_path);
  handoff.handshake_timeout = config_.attach_timeout;
  handoff.max_connections = kAttachHeadroomThreads;
  handoff.max_connections_per_uid = std::min(config_.max_handoffs_per_uid, kAttachHeadroomThreads);
  auto handoff_server = HandoffServer::Start(handoff, handoffs_.get());
  if (!handoff_server.ok()) return handoff_server.status();
  handoff_server_ = std::move(*handoff_server);
  if (absl::Status s = ApplySocketAccess(handoff.path); !s.ok()) return s;
  // Health is kolod's own service, not gRPC's (see health_service.h).
  grpc::EnableDefaultHealthCheckService(false);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  if (absl::Status s = StartUnixServer(); !s.ok()) return s;
  if (config_.status_address.empty()) return absl::OkStatus();
  return StartStatusTcpServer();
}

// Shares before totals on the socket: each call is counted against its
// uid's share (the uid's sessions plus headroom, consistent with
// --max_sessions_per_uid) and a call without credentials also against the
// uid's anonymous share, and closed after --anonymous_call_deadline_s; only
// then do the totals (and gRPC's thread cap behind them) apply. No
// keepalive or connection age here: an Attach stream lives for its job, and
// a dead client's connection ends with its process.
absl::Status Daemon::StartUnixServer() {
  health_unix_ = std::make_unique<HealthService>(std::vector<std::string>{
      kolo::v1::Node::service_full_name(), kolo::v1::Status::service_full_name(),
      kolo::v1::Admin::service_full_name()});
  const int per_uid = config_.max_sessions_per_uid + kHeadroomPerUid;
  const std::string per_uid_knob = absl::StrCat("--max_sessions_per_uid + ", kHeadroomPerUid);
  CallGateOptions gate;
  gate.where = "the Unix socket";
  gate.identity = CallerIdentity::kUnixPeerUid;
  gate.calls = ShareLimits{per_uid, config_.max_sessions + kAttachHeadroomThreads};
  gate.calls_knob = per_uid_knob;
  gate.anonymous_calls = ShareLimits{config_.max_anonymous_calls, kAttachHeadroomThreads};
  gate.anonymous_knob = "--max_anonymous_calls";
  gate.anonymous_deadline = config_.anonymous_call_deadline;
  gate.presented = [rules = CallCredentialRules{admin_token_, handoffs_.get(), true}](
                       const CallStart& call) { return JudgeCall(call, rules, absl::Now()); };
  unix_gate_ = std::make_unique<CallGate>(std::move(gate));
  // No listening port: UnixListener accepts, so that each connection's uid
  // comes from the kernel, and hands it over.
  grpc::ServerBuilder builder;
  // Every attached session holds a stream (and a thread) for its lifetime;
  // the cap leaves room for attaches in progress and status calls, and a
  // call beyond it fails alone (RESOURCE_EXHAUSTED) instead of the daemon.
  grpc::ResourceQuota quota("kolod-unix");
  quota.SetMaxThreads(config_.max_sessions + 2 * kAttachHeadroomThreads);
  builder.SetResourceQuota(quota);
  // One process may carry all its uid's sessions on one connection.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, per_uid);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> gates;
  gates.push_back(unix_gate_->Factory());
  builder.experimental().SetInterceptorCreators(std::move(gates));
  builder.RegisterService(node_service_.get());
  builder.RegisterService(status_service_.get());
  builder.RegisterService(admin_service_.get());
  builder.RegisterService(health_unix_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot start the gRPC server for unix:", config_.socket_path));
  }
  UnixListenerOptions listen;
  listen.path = config_.socket_path;
  listen.connections = ShareLimits{per_uid, config_.max_sessions + 2 * kAttachHeadroomThreads};
  listen.knob = per_uid_knob;
  auto listener = UnixListener::Start(listen, [server = server_.get()](UniqueFd connection) {
    grpc::AddInsecureChannelFromFd(server, connection.Release());
  });
  if (!listener.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot serve on unix:", config_.socket_path, ": ",
                                               listener.status().message(),
                                               " (is its directory there and writable?)"));
  }
  unix_listener_ = std::move(*listener);
  return ApplySocketAccess(config_.socket_path);
}

// On the status port a caller is its source address, or the admin token;
// calls without the token live --anonymous_call_deadline_s at most.
absl::Status Daemon::StartStatusTcpServer() {
  std::string host, port;
  if (absl::Status s = SplitHostPort(config_.status_address, &host, &port); !s.ok()) return s;
  CallGateOptions gate;
  gate.where = "the status port";
  gate.identity = CallerIdentity::kSourceAddress;
  gate.calls = ShareLimits{config_.max_status_calls_per_address, kStatusCalls};
  gate.calls_knob = "--max_status_calls_per_address";
  gate.anonymous_calls = ShareLimits{config_.max_status_calls_per_address, kStatusAnonymousCalls};
  gate.anonymous_knob = "--max_status_calls_per_address";
  gate.anonymous_deadline = config_.anonymous_call_deadline;
  gate.presented = [rules = CallCredentialRules{admin_token_, nullptr, false}](
                       const CallStart& call) { return JudgeCall(call, rules, absl::Now()); };
  tcp_gate_ = std::make_unique<CallGate>(std::move(gate));
  int selected = 0;
  grpc::ServerBuilder tcp;
  tcp.AddListeningPort(config_.status_address, grpc::InsecureServerCredentials(), &selected);
  grpc::ResourceQuota quota("kolod-status");
  quota.SetMaxThreads(kStatusThreads);
  tcp.SetResourceQuota(quota);
  tcp.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, config_.max_status_calls_per_address);
  tcp.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                         ClampedMilliseconds(config_.anonymous_call_deadline));
  tcp.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, kStatusIdleMs);
  tcp.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, kStatusMaxAgeMs);
  tcp.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, kStatusAgeGraceMs);
  tcp.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kStatusKeepaliveMs);
  tcp.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kStatusKeepaliveTimeoutMs);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> gates;
  gates.push_back(tcp_gate_->Factory());
  tcp.experimental().SetInterceptorCreators(std::move(gates));
  tcp.RegisterService(status_service_.get());
  tcp.RegisterService(admin_service_.get());
  health_tcp_ = std::make_unique<HealthService>(std::vector<std::string>{
      kolo::v1::Status::service_full_name(), kolo::v1::Admin::service_full_name()});
  tcp.RegisterService(health_tcp_.get());
  tcp_server_ = tcp.BuildAndStart();
  if (tcp_server_ == nullptr || selected == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve status on ", config_.status_address,
                     " (in use? set --status_address, or empty to disable)"));
  }
  status_address_ = absl::StrCat(
      host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host, ":", selected);
  return absl::OkStatus();
}

absl::Status Daemon::ApplySocketAccess(const std::string& path) const {
  if (chmod(path.c_str(), config_.socket_mode) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("chmod ", path));
  }
  if (config_.socket_group.empty()) return absl::OkStatus();
  group* g = getgrnam(config_.socket_group.c_str());
  if (g == nullptr) return absl::NotFoundError(absl::StrCat("no group ", config_.socket_group));
  if (chown(path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("chgrp ", config_.socket_group, " ", path));
  }
  return absl::OkStatus();
}

int Daemon::metrics_port() const { return metrics_http_ ? metrics_http_->port() : 0; }

void Daemon::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  (void)NotifyServiceManager("STOPPING=1");
  // No new connection reaches server_ from here on.
  unix_listener_.reset();
  if (health_unix_) health_unix_->StopServing();
  if (health_tcp_) health_tcp_->StopServing();
  if (tcp_server_) tcp_server_->Shutdown(std::chrono::system_clock::now());
  if (peer_server_) peer_server_->Shutdown(std::chrono::system_clock::now());
  // Cancels the Attach streams still open after the deadline; their handlers
  // close the sessions.
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  handoff_server_.reset();
  unlink(config_.socket_path.c_str());
}

int Daemon::job_count() const { return registry_->size(); }

void Daemon::Wait() {
  if (server_) server_->Wait();
}

Daemon::~Daemon() {
  Shutdown();
  if (server_) server_->Wait();
  if (tcp_server_) tcp_server_->Wait();
  if (peer_server_) peer_server_->Wait();
  // The stall inspector reads the registry: stop it first.
  stall_inspector_.reset();
  // Jobs' peer negotiators use the coordinators: drop the jobs first.
  registry_.reset();
}

}  // namespace kolo::daemon
