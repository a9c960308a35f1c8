#include "daemon/status_service.h"

#include <unistd.h>

#include "absl/time/clock.h"

namespace kolo::daemon {

grpc::Status StatusService::GetStatus(grpc::ServerContext*,
                                      const kolo::v1::GetStatusRequest*,
                                      kolo::v1::GetStatusResponse* response) {
  absl::Time now = absl::Now();
  auto* node = response->mutable_node();
  node->set_version(facts_.version);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  node->set_hostname(host);
  node->set_pid(getpid());
  node->set_uptime_s(absl::ToDoubleSeconds(now - facts_.started));
  node->set_sessions(sessions_());
  node->set_socket_path(facts_.socket_path);
  node->set_fusion_threshold_bytes(facts_.fusion_threshold_bytes);
  node->set_worker_threads(facts_.worker_threads);
  for (const JobSnapshot& j : registry_->Snapshot()) {
    auto* job = response->add_jobs();
    job->set_job_id(j.job_id);
    job->set_size(j.size);
    job->set_state(j.aborted ? "aborted" : "running");
    job->set_error(j.error);
    job->set_responses(j.responses);
    job->set_fused_tensors(j.fused_tensors);
    job->set_bytes_reduced(j.bytes_reduced);
    for (const RankSnapshot& r : j.ranks) {
      auto* rank = job->add_ranks();
      rank->set_rank(r.rank);
      rank->set_session_id(r.session_id);
      rank->set_pid(r.pid);
      rank->set_submitted(r.submitted);
      rank->set_completed(r.completed);
      rank->set_attached(r.attached);
    }
    for (const PendingView& p : j.pending) {
      auto* t = job->add_pending();
      t->set_name(p.name);
      t->set_collective(std::string(CollectiveKindName(p.kind)));
      for (int r : p.submitted) t->add_submitted_ranks(r);
      for (int r : p.missing) t->add_missing_ranks(r);
      t->set_waiting_s(absl::ToDoubleSeconds(now - p.first_submitted));
    }
  }
  return grpc::Status::OK;
}

}  // namespace kolo::daemon
