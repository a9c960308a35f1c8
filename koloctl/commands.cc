#include "koloctl/commands.h"

#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/handoff.h"
#include "common/status_macros.h"
#include "koloctl/format.h"
#include "koloctl/render.h"

namespace kolo::koloctl {
namespace {

// The one place where koloctl converts a gRPC status: the code is kept and
// the message names the call.
absl::Status FromRpc(const char* call, const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(call, ": ", s.error_message()));
}

// Every call's deadline and, when there is one, the identity ticket.
void SetDeadline(grpc::ClientContext& context, const CommandOptions& options) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + options.timeout));
  if (!options.identity_ticket.empty()) {
    context.AddMetadata(kHandoffMetadata, options.identity_ticket);
  }
}

// Prepares an Admin call: its deadline and the bearer token.
absl::Status PrepareAdmin(const char* call, const Stubs& stubs, const CommandOptions& options,
                          grpc::ClientContext& context) {
  if (stubs.admin == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(call, ": no Admin service stub"));
  }
  SetDeadline(context, options);
  // Without a token the call still goes out: the daemon is the one that
  // decides, and answers UNAUTHENTICATED.
  if (!options.admin_token.empty()) {
    context.AddMetadata("authorization", absl::StrCat("Bearer ", options.admin_token));
  }
  return absl::OkStatus();
}

// An Admin failure; a refused token names where the token came from.
absl::Status FromAdminRpc(const char* call, const grpc::Status& s, const CommandOptions& options) {
  absl::Status status = FromRpc(call, s);
  if ((absl::IsPermissionDenied(status) || absl::IsUnauthenticated(status)) &&
      !options.admin_token_source.empty()) {
    return absl::Status(status.code(), absl::StrCat(status.message(), " (admin token from ",
                                                    options.admin_token_source, ")"));
  }
  return status;
}

absl::Status PrintJson(const google::protobuf::Message& message, std::ostream& out) {
  KOLO_ASSIGN_OR_RETURN(std::string json, ToJson(message));
  out << json;
  return absl::OkStatus();
}

absl::StatusOr<kolo::v1::GetStatusResponse> GetStatus(const Stubs& stubs,
                                                      const CommandOptions& options) {
  grpc::ClientContext context;
  SetDeadline(context, options);
  kolo::v1::GetStatusResponse response;
  KOLO_RETURN_IF_ERROR(FromRpc("GetStatus", stubs.status->GetStatus(&context, {}, &response)));
  return response;
}

}  // namespace

absl::Status RunStatus(const Stubs& stubs, const CommandOptions& options, std::ostream& out) {
  KOLO_ASSIGN_OR_RETURN(kolo::v1::GetStatusResponse response, GetStatus(stubs, options));
  if (options.json) return PrintJson(response, out);
  out << RenderStatus(response);
  return absl::OkStatus();
}

absl::Status RunJobs(const Stubs& stubs, const CommandOptions& options, std::ostream& out) {
  KOLO_ASSIGN_OR_RETURN(kolo::v1::GetStatusResponse response, GetStatus(stubs, options));
  if (options.json) return PrintJson(response, out);
  out << RenderJobs(response);
  return absl::OkStatus();
}

absl::Status RunJob(const Stubs& stubs, const CommandOptions& options, const std::string& job_id,
                    std::ostream& out) {
  grpc::ClientContext context;
  SetDeadline(context, options);
  kolo::v1::GetJobRequest request;
  request.set_job_id(job_id);
  kolo::v1::JobDetail response;
  KOLO_RETURN_IF_ERROR(FromRpc("GetJob", stubs.status->GetJob(&context, request, &response)));
  if (options.json) return PrintJson(response, out);
  out << RenderJob(response);
  return absl::OkStatus();
}

absl::Status RunStalls(const Stubs& stubs, const CommandOptions& options, std::ostream& out) {
  grpc::ClientContext context;
  SetDeadline(context, options);
  kolo::v1::ListStallsResponse response;
  KOLO_RETURN_IF_ERROR(FromRpc("ListStalls", stubs.status->ListStalls(&context, {}, &response)));
  if (options.json) return PrintJson(response, out);
  out << RenderStalls(response);
  return absl::OkStatus();
}

absl::Status RunMetrics(const Stubs& stubs, const CommandOptions& options, std::ostream& out) {
  grpc::ClientContext context;
  SetDeadline(context, options);
  kolo::v1::GetMetricsResponse response;
  KOLO_RETURN_IF_ERROR(FromRpc("GetMetrics", stubs.status->GetMetrics(&context, {}, &response)));
  if (options.json) return PrintJson(response, out);
  out << response.text();
  return absl::OkStatus();
}

absl::Status RunTimelineStart(const Stubs& stubs, const CommandOptions& options,
                              uint64_t max_events, std::ostream& out) {
  grpc::ClientContext context;
  SetDeadline(context, options);
  kolo::v1::StartTimelineRequest request;
  request.set_max_events(max_events);
  kolo::v1::StartTimelineResponse response;
  KOLO_RETURN_IF_ERROR(
      FromRpc("StartTimeline", stubs.status->StartTimeline(&context, request, &response)));
  if (options.json) return PrintJson(response, out);
  out << "timeline recording (max events: "
      << (max_events == 0 ? std::string("daemon default") : absl::StrCat(max_events))
      << "); stop it with: koloctl timeline stop [--out FILE]\n";
  return absl::OkStatus();
}

absl::Status RunTimelineStop(const Stubs& stubs, const CommandOptions& options,
                             const std::string& out_path, std::ostream& out) {
  std::ofstream file(out_path, std::ios::out | std::ios::trunc | std::ios::binary);
  if (!file) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", out_path, ": ", std::strerror(errno)));
  }
  grpc::ClientContext context;
  SetDeadline(context, options);
  kolo::v1::StopTimelineResponse response;
  KOLO_RETURN_IF_ERROR(
      FromRpc("StopTimeline", stubs.status->StopTimeline(&context, {}, &response)));
  file << response.trace_json();
  file.close();
  if (!file) {
    return absl::DataLossError(absl::StrCat("writing the timeline (", response.events(),
                                            " events) to ", out_path,
                                            " failed: ", std::strerror(errno)));
  }
  if (options.json) {
    response.clear_trace_json();
    return PrintJson(response, out);
  }
  out << "wrote " << response.events() << " events (" << response.dropped() << " dropped) to "
      << out_path << "\n";
  return absl::OkStatus();
}

absl::Status RunAbort(const Stubs& stubs, const CommandOptions& options, const std::string& job_id,
                      const std::string& reason, std::ostream& out) {
  grpc::ClientContext context;
  KOLO_RETURN_IF_ERROR(PrepareAdmin("AbortJob", stubs, options, context));
  kolo::v1::AbortJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  kolo::v1::AbortJobResponse response;
  KOLO_RETURN_IF_ERROR(
      FromAdminRpc("AbortJob", stubs.admin->AbortJob(&context, request, &response), options));
  if (options.json) return PrintJson(response, out);
  out << "aborted job " << job_id << "\n";
  return absl::OkStatus();
}

absl::Status RunDrain(const Stubs& stubs, const CommandOptions& options, std::ostream& out) {
  grpc::ClientContext context;
  KOLO_RETURN_IF_ERROR(PrepareAdmin("Drain", stubs, options, context));
  kolo::v1::DrainResponse response;
  KOLO_RETURN_IF_ERROR(FromAdminRpc("Drain", stubs.admin->Drain(&context, {}, &response), options));
  if (options.json) return PrintJson(response, out);
  out << "draining: new jobs are refused; " << response.running_jobs()
      << " running job(s) will finish\n";
  return absl::OkStatus();
}

absl::Status RunLogLevel(const Stubs& stubs, const CommandOptions& options,
                         const std::string& level, std::ostream& out) {
  grpc::ClientContext context;
  KOLO_RETURN_IF_ERROR(PrepareAdmin("SetLogLevel", stubs, options, context));
  kolo::v1::SetLogLevelRequest request;
  request.set_level(level);
  kolo::v1::SetLogLevelResponse response;
  KOLO_RETURN_IF_ERROR(
      FromAdminRpc("SetLogLevel", stubs.admin->SetLogLevel(&context, request, &response), options));
  if (options.json) return PrintJson(response, out);
  out << "log level: " << (response.previous().empty() ? "?" : response.previous()) << " -> "
      << level << "\n";
  return absl::OkStatus();
}

}  // namespace kolo::koloctl
