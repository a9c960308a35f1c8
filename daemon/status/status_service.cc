#include "daemon/status/status_service.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "daemon/observe/display_name.h"
#include "proto/kolo/abi/collective_traits.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

double AgeSeconds(absl::Time now, absl::Time then) {
  return then == absl::InfinitePast() ? -1.0 : absl::ToDoubleSeconds(now - then);
}

void FillJob(const JobSnapshot& j, absl::Time now, kolo::v1::JobInfo* job) {
  job->set_job_id(j.job_id);
  job->set_size(j.size);
  job->set_state(j.aborted ? "aborted" : "running");
  job->set_error(j.error);
  job->set_responses(j.responses);
  job->set_fused_tensors(j.fused_tensors);
  job->set_bytes_reduced(j.bytes_reduced);
  double uptime = absl::ToDoubleSeconds(now - j.created);
  job->set_uptime_s(uptime);
  job->set_bytes_per_s(uptime > 0 ? j.bytes_reduced / uptime : 0);
  job->set_data_plane_negotiation(j.data_plane_negotiation);
  for (const RankSnapshot& r : j.ranks) {
    auto* rank = job->add_ranks();
    rank->set_rank(r.rank);
    rank->set_session_id(r.session_id);
    rank->set_pid(r.pid);
    rank->set_submitted(r.submitted);
    rank->set_completed(r.completed);
    rank->set_attached(r.attached);
    rank->set_last_submit_age_s(AgeSeconds(now, r.last_submit));
    rank->set_last_complete_age_s(AgeSeconds(now, r.last_complete));
  }
  job->set_epoch(j.epoch);
  const absl::Time first = j.epochs.empty() ? now : j.epochs.front().at;
  for (const EpochRecord& e : j.epochs) {
    auto* change = job->add_epochs();
    change->set_epoch(e.epoch);
    change->set_at_s(absl::ToDoubleSeconds(e.at - first));
    change->set_size(e.size);
    change->set_reason(e.reason);
    for (int r : e.joined) change->add_joined(r);
    change->set_left(e.left);
  }
  for (const PendingView& p : j.pending) {
    auto* t = job->add_pending();
    t->set_name(DisplayName(p.name));
    t->set_collective(CollectiveKindName(p.kind));
    for (int r : p.submitted) t->add_submitted_ranks(r);
    for (int r : p.missing) t->add_missing_ranks(r);
    t->set_waiting_s(absl::ToDoubleSeconds(now - p.first_submitted));
    t->set_process_set(p.process_set);
  }
}

void FillStall(const std::string& job_id, const StallView& s, kolo::v1::Stall* out) {
  out->set_job_id(job_id);
  out->set_name(DisplayName(s.name));
  out->set_collective(CollectiveKindName(s.kind));
  out->set_waiting_s(absl::ToDoubleSeconds(s.waiting));
  for (int r : s.submitted) out->add_submitted_ranks(r);
  for (int r : s.missing) out->add_missing_ranks(r);
  out->set_kind(s.executing ? "executing" : "missing_ranks");
  out->set_message(s.message);
}

}  // namespace

void StatusService::FillNode(kolo::v1::NodeInfo* node) const {
  absl::Time now = absl::Now();
  node->set_version(facts_.version);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  node->set_hostname(host);
  node->set_pid(getpid());
  node->set_uptime_s(absl::ToDoubleSeconds(now - facts_.started));
  node->set_sessions(sources_.sessions ? sources_.sessions() : 0);
  node->set_socket_path(facts_.socket_path);
  node->set_fusion_threshold_bytes(facts_.fusion_threshold_bytes);
  node->set_worker_threads(facts_.worker_threads);
  node->set_draining(sources_.registry->draining());
  node->set_log_level(std::string(spdlog::level::to_string_view(spdlog::get_level()).data()));
  {
    absl::MutexLock l(&mu_);
    node->set_status_address(status_address_);
  }
  node->set_metrics_port(facts_.metrics_port);
  for (const auto& d : facts_.devices) node->add_devices(d);
  for (const auto& [k, v] : facts_.config) (*node->mutable_config())[k] = v;
  node->set_stall_warning_s(absl::ToDoubleSeconds(sources_.stall_policy.warning));
  node->set_stall_timeout_s(absl::ToDoubleSeconds(sources_.stall_policy.timeout));
}

absl::StatusOr<Viewer> StatusService::ViewerOf(const grpc::ServerContext& context) const {
  if (sources_.viewers == nullptr) return Viewer{true, std::nullopt};
  return sources_.viewers->Resolve(context);
}

grpc::Status StatusService::MaySeeEverything(const grpc::ServerContext& context) const {
  auto viewer = ViewerOf(context);
  if (!viewer.ok()) return ToGrpcStatus(viewer.status());
  if (!viewer->everything) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "the timeline records every job: it needs the admin token or root");
  }
  return grpc::Status::OK;
}

grpc::Status StatusService::GetStatus(grpc::ServerContext* context,
                                      const kolo::v1::GetStatusRequest*,
                                      kolo::v1::GetStatusResponse* response) {
  auto viewer = ViewerOf(*context);
  if (!viewer.ok()) return ToGrpcStatus(viewer.status());
  FillNode(response->mutable_node());
  absl::Time now = absl::Now();
  for (const JobSnapshot& j : sources_.registry->Snapshot()) {
    if (viewer->MaySee(j.uid)) FillJob(j, now, response->add_jobs());
  }
  return grpc::Status::OK;
}

grpc::Status StatusService::GetJob(grpc::ServerContext* context,
                                   const kolo::v1::GetJobRequest* request,
                                   kolo::v1::JobDetail* response) {
  auto viewer = ViewerOf(*context);
  if (!viewer.ok()) return ToGrpcStatus(viewer.status());
  std::shared_ptr<Job> job;
  uid_t owner = 0;
  for (JobRegistry::OwnedJob& owned : sources_.registry->Find(request->job_id())) {
    if (viewer->MaySee(owned.uid)) {
      job = std::move(owned.job);
      owner = owned.uid;
    }
  }
  // A job the caller may not see is answered as one that does not exist.
  if (job == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "no job " + request->job_id() + " on this node" +
                            (viewer->uid.has_value() || viewer->everything
                                 ? ""
                                 : " that this caller may see (job details need the admin "
                                   "token over TCP)"));
  }
  absl::Time now = absl::Now();
  JobSnapshot j = job->Snapshot(/*with_history=*/true);
  j.epochs = sources_.registry->Epochs(owner, j.job_id);
  FillJob(j, now, response->mutable_job());
  for (const StallView& s : job->Stalls(now, sources_.stall_policy.warning)) {
    FillStall(j.job_id, s, response->add_stalls());
  }
  for (const CollectiveRecord& r : j.recent) {
    auto* rec = response->add_recent();
    rec->set_sequence(r.sequence);
    rec->set_collective(CollectiveKindName(r.kind));
    rec->set_name(DisplayName(r.name));
    rec->set_dtype(DTypeName(r.dtype));
    rec->set_op(r.kind == CollectiveKind::kAllreduce ? ReduceOpName(r.op) : "");
    rec->set_bytes(r.bytes);
    rec->set_phase(r.failed ? "failed" : "done");
    rec->set_queued_at_s(absl::ToDoubleSeconds(r.first_submitted - j.created));
    rec->set_ready_after_s(absl::ToDoubleSeconds(r.ready_at - r.first_submitted));
    rec->set_execute_s(absl::ToDoubleSeconds(r.execute));
    rec->set_error(r.error);
    rec->set_fused_with(r.fused_with);
  }
  for (const std::string& e : j.errors) response->add_errors(e);
  return grpc::Status::OK;
}

grpc::Status StatusService::ListStalls(grpc::ServerContext* context,
                                       const kolo::v1::ListStallsRequest*,
                                       kolo::v1::ListStallsResponse* response) {
  auto viewer = ViewerOf(*context);
  if (!viewer.ok()) return ToGrpcStatus(viewer.status());
  absl::Time now = absl::Now();
  for (const JobRegistry::OwnedJob& owned : sources_.registry->Owned()) {
    if (!viewer->MaySee(owned.uid)) continue;
    for (const StallView& s : owned.job->Stalls(now, sources_.stall_policy.warning)) {
      FillStall(owned.job->id(), s, response->add_stalls());
    }
  }
  return grpc::Status::OK;
}

grpc::Status StatusService::GetMetrics(grpc::ServerContext*, const kolo::v1::GetMetricsRequest*,
                                       kolo::v1::GetMetricsResponse* response) {
  response->set_text(sources_.metrics->Render());
  return grpc::Status::OK;
}

grpc::Status StatusService::StartTimeline(grpc::ServerContext* context,
                                          const kolo::v1::StartTimelineRequest* request,
                                          kolo::v1::StartTimelineResponse*) {
  if (grpc::Status s = MaySeeEverything(*context); !s.ok()) return s;
  if (request->max_events() > kMaxTimelineEvents) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("max_events ", request->max_events(), " is over the limit of ",
                                     kMaxTimelineEvents));
  }
  sources_.timeline->Start(request->max_events());
  spdlog::info("timeline recording started (at most {} events)",
               request->max_events() == 0 ? Timeline::kDefaultMaxEvents : request->max_events());
  return grpc::Status::OK;
}

grpc::Status StatusService::StopTimeline(grpc::ServerContext* context,
                                         const kolo::v1::StopTimelineRequest*,
                                         kolo::v1::StopTimelineResponse* response) {
  if (grpc::Status s = MaySeeEverything(*context); !s.ok()) return s;
  absl::StatusOr<TimelineTrace> trace = sources_.timeline->StopRecording();
  if (!trace.ok()) return ToGrpcStatus(trace.status());
  response->set_trace_json(std::move(trace->json));
  response->set_events(trace->events);
  response->set_dropped(trace->dropped);
  spdlog::info("timeline recording stopped: {} events, {} dropped", trace->events, trace->dropped);
  return grpc::Status::OK;
}

}  // namespace kolo::daemon
