// StatusService: kolo.v1.Status — what this kolod is doing: node facts,
// jobs, ranks, pending tensors, stalls, the flight recorder, metrics and the
// timeline. Read-only apart from starting and stopping the timeline.
//
// Thread-safety: thread-safe; reads snapshots from the registry.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/job/job_registry.h"
#include "daemon/observe/metrics.h"
#include "daemon/status/stall_inspector.h"
#include "daemon/observe/timeline.h"
#include "daemon/status/viewer.h"
#include "proto/kolo/v1/status.grpc.pb.h"

namespace kolo::daemon {

struct NodeFacts {
  std::string version;
  std::string socket_path;
  uint64_t fusion_threshold_bytes = 0;
  int worker_threads = 0;
  absl::Time started;
  int metrics_port = 0;
  std::vector<std::string> devices;
  std::map<std::string, std::string> config;
};

// What the Status service reads; every pointer must outlive the service.
struct StatusSources {
  const JobRegistry* registry = nullptr;
  const Metrics* metrics = nullptr;
  Timeline* timeline = nullptr;
  StallPolicy stall_policy;
  std::function<int()> sessions;
  // Decides what each caller may see (see viewer.h); null: every caller
  // sees everything (tests of the rendering only).
  const ViewerResolver* viewers = nullptr;
};

class StatusService final : public kolo::v1::Status::Service {
 public:
  StatusService(StatusSources sources, NodeFacts facts)
      : sources_(std::move(sources)), facts_(std::move(facts)) {}

  grpc::Status GetStatus(grpc::ServerContext* context, const kolo::v1::GetStatusRequest*,
                         kolo::v1::GetStatusResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const kolo::v1::GetJobRequest* request,
                      kolo::v1::JobDetail* response) override;
  grpc::Status ListStalls(grpc::ServerContext* context, const kolo::v1::ListStallsRequest*,
                          kolo::v1::ListStallsResponse* response) override;
  grpc::Status GetMetrics(grpc::ServerContext*, const kolo::v1::GetMetricsRequest*,
                          kolo::v1::GetMetricsResponse* response) override;
  // The timeline records every job's tensors: only a viewer who sees
  // everything may start or stop it.
  grpc::Status StartTimeline(grpc::ServerContext* context,
                             const kolo::v1::StartTimelineRequest* request,
                             kolo::v1::StartTimelineResponse*) override;
  grpc::Status StopTimeline(grpc::ServerContext* context, const kolo::v1::StopTimelineRequest*,
                            kolo::v1::StopTimelineResponse* response) override;
  // The most events one timeline may hold (INVALID_ARGUMENT beyond).
  static constexpr uint64_t kMaxTimelineEvents = uint64_t{1} << 24;

  void FillNode(kolo::v1::NodeInfo* node) const;
  // Known only once the TCP listener is bound.
  void set_status_address(std::string address) {
    absl::MutexLock l(&mu_);
    status_address_ = std::move(address);
  }

 private:
  absl::StatusOr<Viewer> ViewerOf(const grpc::ServerContext& context) const;
  // OK for a caller who sees every job (the timeline's rule).
  grpc::Status MaySeeEverything(const grpc::ServerContext& context) const;

  const StatusSources sources_;
  const NodeFacts facts_;
  mutable absl::Mutex mu_;
  std::string status_address_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kolo::daemon
