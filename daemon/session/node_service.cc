#include "daemon/session/node_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/random_id.h"
#include "proto/kolo/abi/shm_abi_v1.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

constexpr int kMaxJobSize = 1 << 20;

bool ValidJobId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

absl::Status ValidateAttachRequest(const kolo::v1::AttachRequest& r) {
  if (!ValidJobId(r.job_id())) {
    return absl::InvalidArgumentError("job_id must be 1-128 characters of [A-Za-z0-9._:-]");
  }
  if (r.job_token().size() > 256) {
    return absl::InvalidArgumentError("job_token is longer than 256 bytes");
  }
  if (r.size() < 1 || r.size() > kMaxJobSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("size ", r.size(), " outside [1, ", kMaxJobSize, "]"));
  }
  if (r.rank() < 0 || r.rank() >= r.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", r.rank(), " outside [0, ", r.size(), ")"));
  }
  if (r.local_size() < 1 || r.local_size() > r.size() || r.local_rank() < 0 ||
      r.local_rank() >= r.local_size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", r.rank(), ": local rank ",
                                                   r.local_rank(), " of local size ",
                                                   r.local_size(), " in a job of ", r.size()));
  }
  if (r.local_size() < r.size() && r.coordinator().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", r.rank(), ": a job spanning nodes (local size ", r.local_size(), " of ", r.size(),
        ") needs the coordinator's peer address (KOLO_COORDINATOR)"));
  }
  if (r.coordinator().size() > 256) {
    return absl::InvalidArgumentError("coordinator address longer than 256 bytes");
  }
  if (r.shm_abi_version() != abi::v1::kVersion) {
    return absl::FailedPreconditionError(absl::StrCat("client speaks shared-memory ABI ",
                                                      r.shm_abi_version(), ", kolod speaks ",
                                                      abi::v1::kVersion));
  }
  if (r.pid() <= 0 || r.pid() > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid pid ", r.pid()));
  }
  return absl::OkStatus();
}

grpc::Status NodeService::Attach(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<kolo::v1::DaemonMessage, kolo::v1::ClientMessage>* stream) {
  kolo::v1::ClientMessage first;
  if (!stream->Read(&first) || !first.has_attach()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "Attach must start with an AttachRequest");
  }
  const kolo::v1::AttachRequest& req = first.attach();
  if (absl::Status s = ValidateAttachRequest(req); !s.ok()) {
    return ToGrpcStatus(s);
  }
  SessionIdentity identity{RandomHex(16), req.job_id(), req.rank(), static_cast<pid_t>(req.pid())};
  auto session = Session::Open(identity, req.shm_fd(), req.shm_bytes(), options_.limits);
  if (!session.ok()) {
    spdlog::warn("job {} rank {}: attach refused: {}", req.job_id(), req.rank(),
                 session.status().ToString());
    return ToGrpcStatus(session.status());
  }
  auto job = registry_->Join(JoinRequest{req.job_id(), req.job_token(), req.rank(), req.size(),
                                         identity.session_id, req.pid(), req.local_size(),
                                         req.coordinator()});
  if (!job.ok()) {
    spdlog::warn("job {} rank {}: attach refused: {}", req.job_id(), req.rank(),
                 job.status().ToString());
    (*session)->Close();
    return ToGrpcStatus(job.status());
  }

  auto entry = std::make_shared<Entry>();
  entry->session = *session;
  {
    absl::MutexLock l(&mu_);
    sessions_[identity.session_id] = entry;
  }

  absl::Mutex write_mu;
  absl::Mutex failure_mu;
  absl::Status failure;
  (*session)->Start(*job, [&](const absl::Status& status) {
    {
      absl::MutexLock l(&failure_mu);
      if (!failure.ok()) return;
      failure = status;
    }
    spdlog::warn("job {} rank {}: session failed: {}", identity.job_id, identity.rank,
                 status.ToString());
    kolo::v1::DaemonMessage event;
    event.mutable_event()->set_job_id(identity.job_id);
    event.mutable_event()->set_code(static_cast<int>(status.code()));
    event.mutable_event()->set_message(std::string(status.message()));
    {
      absl::MutexLock l(&write_mu);
      stream->Write(event);
    }
    context->TryCancel();
  });

  kolo::v1::DaemonMessage hello;
  auto* attached = hello.mutable_attached();
  attached->set_session_id(identity.session_id);
  attached->set_shm_abi_version(abi::v1::kVersion);
  attached->set_fusion_threshold_bytes(options_.fusion_threshold_bytes);
  attached->set_max_submit_capacity(options_.limits.max_submit_capacity);
  attached->set_daemon_version(options_.version);
  {
    absl::MutexLock l(&write_mu);
    stream->Write(hello);
  }
  spdlog::info("job {} rank {}/{}: attached (pid {}, session {})", req.job_id(), req.rank(),
               req.size(), req.pid(), identity.session_id);
  // Once every local rank attached, the job starts its negotiator (across
  // nodes: the last local rank connects this node to the job's coordinator).
  (*job)->MaybeStart();

  // The session lives as long as this stream.
  kolo::v1::ClientMessage ignored;
  while (stream->Read(&ignored)) {
  }

  (*session)->Close();
  absl::Status why;
  {
    absl::MutexLock l(&failure_mu);
    why = failure;
  }
  bool clean = entry->clean.load() && why.ok();
  if (why.ok() && !clean) {
    why = absl::UnavailableError(
        absl::StrCat("its session ended without detaching (pid ", req.pid(), ")"));
  }
  registry_->Leave(*job, req.rank(), clean, why);
  {
    absl::MutexLock l(&mu_);
    sessions_.erase(identity.session_id);
  }
  if (clean) {
    spdlog::info("job {} rank {}: detached", req.job_id(), req.rank());
  } else {
    spdlog::warn("job {} rank {}: session lost: {}", req.job_id(), req.rank(), why.ToString());
  }
  return grpc::Status::OK;
}

grpc::Status NodeService::Detach(grpc::ServerContext*, const kolo::v1::DetachRequest* request,
                                 kolo::v1::DetachResponse*) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(request->session_id());
  if (it == sessions_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such session " + request->session_id());
  }
  it->second->clean.store(true);
  return grpc::Status::OK;
}

int NodeService::sessions() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(sessions_.size());
}

}  // namespace kolo::daemon
