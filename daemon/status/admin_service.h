// AdminService: kolo.v1.Admin — abort a job, drain the node, set the log
// level. Every call must carry the node's admin token as
// "authorization: Bearer <token>" metadata.
//
// Thread-safety: thread-safe.
#pragma once

#include <string>

#include "daemon/job/job_registry.h"
#include "proto/kolo/v1/status.grpc.pb.h"

namespace kolo::daemon {

class AdminService final : public kolo::v1::Admin::Service {
 public:
  // `registry` must outlive the service.
  AdminService(JobRegistry* registry, std::string admin_token)
      : registry_(registry), token_(std::move(admin_token)) {}

  grpc::Status AbortJob(grpc::ServerContext* context, const kolo::v1::AbortJobRequest* request,
                        kolo::v1::AbortJobResponse*) override;
  grpc::Status Drain(grpc::ServerContext* context, const kolo::v1::DrainRequest*,
                     kolo::v1::DrainResponse* response) override;
  grpc::Status SetLogLevel(grpc::ServerContext* context,
                           const kolo::v1::SetLogLevelRequest* request,
                           kolo::v1::SetLogLevelResponse* response) override;

 private:
  grpc::Status Authorize(grpc::ServerContext* context) const;

  JobRegistry* const registry_;
  const std::string token_;
};

}  // namespace kolo::daemon
