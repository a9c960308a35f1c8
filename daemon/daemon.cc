#include "daemon/daemon.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/unique_fd.h"
#include "daemon/backend/cpu/cpu_backend.h"
#include "daemon/job_registry.h"
#include "daemon/node_service.h"
#include "daemon/status_service.h"
#include "daemon/worker_pool.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

// A leftover socket file from a daemon that died is removed; a live one is
// an error, so two daemons never share a path.
absl::Status ClaimSocketPath(const std::string& path) {
  if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path must be 1 to ", sizeof(sockaddr_un::sun_path) - 1,
        " bytes: ", path));
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a socket"));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.valid() &&
      connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("another kolod is serving ", path));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoToStatus(errno, absl::StrCat("remove stale socket ", path));
  }
  return absl::OkStatus();
}

}  // namespace

Daemon::Daemon(const DaemonConfig& config) : config_(config) {}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const DaemonConfig& config) {
  if (absl::Status s = ClaimSocketPath(config.socket_path); !s.ok()) return s;
  std::unique_ptr<Daemon> d(new Daemon(config));
  int workers = config.worker_threads > 0
                    ? config.worker_threads
                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1);
  d->pool_ = std::make_unique<WorkerPool>(workers);
  d->backend_ = std::make_unique<CpuBackend>(d->pool_.get());
  d->registry_ = std::make_unique<JobRegistry>(d->backend_.get(),
                                               config.fusion_threshold_bytes);
  NodeServiceOptions node_options;
  node_options.limits.spin = config.spin;
  node_options.limits.max_segment_bytes = config.max_segment_bytes;
  node_options.fusion_threshold_bytes = config.fusion_threshold_bytes;
  node_options.version = kVersion;
  d->node_service_ =
      std::make_unique<NodeService>(d->registry_.get(), node_options);
  NodeService* node = d->node_service_.get();
  d->status_service_ = std::make_unique<StatusService>(
      d->registry_.get(),
      NodeFacts{kVersion, config.socket_path, config.fusion_threshold_bytes,
                workers, absl::Now()},
      [node] { return node->sessions(); });

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + config.socket_path,
                           grpc::InsecureServerCredentials());
  builder.RegisterService(d->node_service_.get());
  builder.RegisterService(d->status_service_.get());
  d->server_ = builder.BuildAndStart();
  if (d->server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve on unix:", config.socket_path,
                     " (is its directory there and writable?)"));
  }
  if (chmod(config.socket_path.c_str(), config.socket_mode) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("chmod ", config.socket_path));
  }
  spdlog::info("kolod {} serving on {} (fusion threshold {} bytes, {} workers)",
               kVersion, config.socket_path, config.fusion_threshold_bytes,
               workers + 1);
  return d;
}

void Daemon::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // Cancels the Attach streams still open after the deadline; their handlers
  // close the sessions.
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(200));
  unlink(config_.socket_path.c_str());
}

void Daemon::Wait() { server_->Wait(); }

Daemon::~Daemon() {
  Shutdown();
  server_->Wait();
}

}  // namespace kolo::daemon
