// UcxLoopbackCluster: N UcxTransports in one process, connected to each
// other, for tests and benchmarks of Kolo's inter-node path on one machine.
// The daemons exchange worker addresses over gRPC; here they are handed over
// in memory.
//
// Thread-safety: not thread-safe; the transports it hands out are.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/transport/ucx_transport.h"

namespace kolo::daemon {

class UcxLoopbackCluster {
 public:
  // Sets UCX_TLS=tcp in this process's environment unless it is set already
  // (UCX reads it when a context is created), then creates and connects
  // `nodes` transports.
  // `handlers[i]`, where given, takes node i's lane messages.
  static absl::StatusOr<UcxLoopbackCluster> Create(int nodes,
                                                   const UcxOptions& options = UcxOptions(),
                                                   std::vector<MessageLane::Handler> handlers = {});

  int nodes() const { return static_cast<int>(transports_.size()); }
  UcxTransport& node(int i) { return *transports_.at(i); }
  // Destroys node i's transport (as if its daemon died); node(i) is then
  // invalid.
  void Destroy(int i) { transports_.at(i).reset(); }

 private:
  std::vector<std::unique_ptr<UcxTransport>> transports_;
};

}  // namespace kolo::daemon
