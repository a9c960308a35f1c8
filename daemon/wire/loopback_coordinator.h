// LoopbackCoordinator: for tests, a job coordinator registry served by the
// real Peer gRPC service on a loopback port of its own (plaintext), as the
// daemon hosting rank 0 runs it. The node hosting rank 0 reaches registry()
// directly; the others dial address().
//
// Thread-safety: not thread-safe; create and destroy on one thread. Destroy
// the jobs that use it first.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/wire/peer_service.h"

namespace kolo::daemon {

class LoopbackCoordinator {
 public:
  explicit LoopbackCoordinator(CoordinatorOptions options = {}) {
    auto registry =
        CoordinatorRegistry::Start(std::move(options), absl::Milliseconds(200), absl::Seconds(10));
    if (!registry.ok()) return;  // ok() says false
    registry_ = std::move(*registry);
    service_ = std::make_unique<PeerService>(registry_.get());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
  }
  ~LoopbackCoordinator() {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }
  LoopbackCoordinator(const LoopbackCoordinator&) = delete;
  LoopbackCoordinator& operator=(const LoopbackCoordinator&) = delete;

  // Whether the server listens (check before use).
  bool ok() const { return server_ != nullptr && port_ > 0; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  CoordinatorRegistry* registry() { return registry_.get(); }

 private:
  std::unique_ptr<CoordinatorRegistry> registry_;
  std::unique_ptr<PeerService> service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;  // last: shut down first
};

}  // namespace kolo::daemon
