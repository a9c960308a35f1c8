#include "daemon/status/admin_service.h"

#include "absl/strings/str_cat.h"
#include "daemon/status/viewer.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {}  // namespace

grpc::Status AdminService::Authorize(grpc::ServerContext* context) const {
  return CheckAdminToken(*context, token_);
}

grpc::Status AdminService::AbortJob(grpc::ServerContext* context,
                                    const kolo::v1::AbortJobRequest* request,
                                    kolo::v1::AbortJobResponse*) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  std::vector<JobRegistry::OwnedJob> jobs = registry_->Find(request->job_id());
  if (jobs.empty()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "no job " + request->job_id() + " on this node");
  }
  std::string reason = request->reason().empty() ? "no reason given" : request->reason();
  // Users choose job ids, so two users may run one each: the operator's
  // abort names the id, and ends both.
  for (const JobRegistry::OwnedJob& owned : jobs) {
    spdlog::warn("job {} (uid {}): aborted by an operator: {}", owned.job->id(), owned.uid, reason);
    owned.job->Abort(absl::AbortedError(
        absl::StrCat("job ", owned.job->id(), " aborted by an operator: ", reason)));
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::Drain(grpc::ServerContext* context, const kolo::v1::DrainRequest*,
                                 kolo::v1::DrainResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  registry_->SetDraining(true);
  response->set_running_jobs(registry_->size());
  spdlog::warn("draining: no new jobs; {} running", registry_->size());
  return grpc::Status::OK;
}

grpc::Status AdminService::SetLogLevel(grpc::ServerContext* context,
                                       const kolo::v1::SetLogLevelRequest* request,
                                       kolo::v1::SetLogLevelResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  spdlog::level::level_enum level = spdlog::level::from_str(request->level());
  if (level == spdlog::level::off && request->level() != "off") {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "unknown log level \"" + request->level() +
                            "\" (trace, debug, info, warn, error, critical, off)");
  }
  response->set_previous(std::string(spdlog::level::to_string_view(spdlog::get_level()).data()));
  spdlog::set_level(level);
  spdlog::info("log level set to {}", request->level());
  return grpc::Status::OK;
}

}  // namespace kolo::daemon
