#include "examples/bench/job_counters.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/handoff.h"

namespace kolo::bench {
namespace {

// The one place this file turns a gRPC status into an absl::Status (the codes
// share their numbering).
absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

}  // namespace

FusionDelta FusionBetween(const JobCounters& before, const JobCounters& after,
                          uint64_t expected_tensors) {
  FusionDelta d;
  if (after.responses < before.responses || after.fused_tensors < before.fused_tensors) {
    return d;  // Not the same job: nothing meaningful to report.
  }
  d.responses = after.responses - before.responses;
  d.tensors = after.fused_tensors - before.fused_tensors;
  if (d.tensors > expected_tensors) {
    const uint64_t extras = d.tensors - expected_tensors;
    d.tensors -= extras;
    d.responses -= std::min(extras, d.responses);
  }
  return d;
}

absl::StatusOr<JobCountersReader> JobCountersReader::Connect(const std::string& socket_path,
                                                             absl::Duration timeout) {
  const std::string target = absl::StrCat("unix:", socket_path);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout))) {
    return absl::UnavailableError(absl::StrCat("kolod status service on ", target,
                                               ": no connection within ",
                                               absl::FormatDuration(timeout)));
  }
  absl::StatusOr<std::string> ticket = HandOff(HandoffSocketPath(socket_path), -1, timeout);
  if (!ticket.ok()) {
    return absl::Status(ticket.status().code(),
                        absl::StrCat("identity from kolod's handoff socket beside ", socket_path,
                                     ": ", ticket.status().message()));
  }
  return JobCountersReader(kolo::v1::Status::NewStub(channel), *std::move(ticket));
}

absl::StatusOr<JobCounters> JobCountersReader::Read(const std::string& job_id) const {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  context.AddMetadata(kHandoffMetadata, identity_ticket_);
  kolo::v1::GetStatusResponse response;
  absl::Status s = FromGrpc(stub_->GetStatus(&context, kolo::v1::GetStatusRequest(), &response),
                            "kolo.v1.Status/GetStatus");
  if (!s.ok()) return s;
  for (const kolo::v1::JobInfo& job : response.jobs()) {
    if (job.job_id() != job_id) continue;
    JobCounters c;
    c.responses = job.responses();
    c.fused_tensors = job.fused_tensors();
    c.fusion_threshold_bytes = response.node().fusion_threshold_bytes();
    return c;
  }
  return absl::NotFoundError(
      absl::StrCat("kolod reports no job \"", job_id, "\" (", response.jobs_size(), " jobs)"));
}

}  // namespace kolo::bench
