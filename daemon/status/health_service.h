// HealthService: grpc.health.v1.Health, for probes (Kubernetes' gRPC probe,
// health-checking tools) on kolod's socket and status port.
//
// Check answers SERVING for the whole server ("") and for each service the
// server was built with, NOT_SERVING once the daemon is stopping, and
// NOT_FOUND for any other name. Watch answers UNIMPLEMENTED, which the
// protocol tells callers to take as "use Check": a Watch held open would
// hold one of the server's threads, which the sessions need.
//
// Why not gRPC's built-in health service: it runs on gRPC's callback API,
// whose polling threads then take turns at every connection of the process,
// the Peer plane's included, and add a thread hand-off to every message a
// multi-node job's negotiation receives.
//
// Thread-safety: thread-safe (the serving flag is atomic).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace kolo::daemon {

class HealthService final : public grpc::health::v1::Health::Service {
 public:
  // `services`: the full names of the services served next to this one.
  explicit HealthService(std::vector<std::string> services);

  // From now on Check answers NOT_SERVING (the daemon is stopping).
  void StopServing() { serving_.store(false, std::memory_order_release); }

  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

 private:
  const std::vector<std::string> services_;
  std::atomic<bool> serving_{true};
};

}  // namespace kolo::daemon
