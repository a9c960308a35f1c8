#include "daemon/transport/ucx_loopback_cluster.h"

#include <cstdlib>
#include <string>

namespace kolo::daemon {

absl::StatusOr<UcxLoopbackCluster> UcxLoopbackCluster::Create(
    int nodes, const UcxOptions& options, std::vector<MessageLane::Handler> handlers) {
  // UCX 1.13 cannot connect two workers with shared-memory transports alone;
  // tcp over loopback always works.
  ::setenv("UCX_TLS", "tcp", /*overwrite=*/0);
  SetUcxDefaults();
  UcxLoopbackCluster cluster;
  std::vector<std::string> addresses;
  for (int i = 0; i < nodes; ++i) {
    absl::StatusOr<std::unique_ptr<UcxTransport>> t = UcxTransport::Create(options);
    if (!t.ok()) return t.status();
    if (static_cast<size_t>(i) < handlers.size() && handlers[i]) {
      (*t)->SetMessageHandler(std::move(handlers[i]));
    }
    addresses.push_back((*t)->worker_address());
    cluster.transports_.push_back(std::move(*t));
  }
  for (int i = 0; i < nodes; ++i) {
    absl::Status s = cluster.transports_[i]->Connect(addresses, i);
    if (!s.ok()) return s;
  }
  return cluster;
}

}  // namespace kolo::daemon
