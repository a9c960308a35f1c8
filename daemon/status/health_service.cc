#include "daemon/status/health_service.h"

#include <algorithm>
#include <utility>

namespace kolo::daemon {

using grpc::health::v1::HealthCheckResponse;

HealthService::HealthService(std::vector<std::string> services) : services_(std::move(services)) {}

grpc::Status HealthService::Check(grpc::ServerContext* /*context*/,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  HealthCheckResponse* response) {
  const std::string& name = request->service();
  if (!name.empty() && std::find(services_.begin(), services_.end(), name) == services_.end()) {
    // The name is the caller's: it is not echoed back.
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "kolod serves no such service");
  }
  response->set_status(serving_.load(std::memory_order_acquire) ? HealthCheckResponse::SERVING
                                                                : HealthCheckResponse::NOT_SERVING);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(grpc::ServerContext* /*context*/,
                                  const grpc::health::v1::HealthCheckRequest* /*request*/,
                                  grpc::ServerWriter<HealthCheckResponse>* /*writer*/) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "kolod answers health Check only; call Check to poll its health");
}

}  // namespace kolo::daemon
