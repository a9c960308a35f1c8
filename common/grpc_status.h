// The one place where absl::Status and grpc::Status convert.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace kolo {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace kolo
