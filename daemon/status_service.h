// StatusService: kolo.v1.Status — what this kolod is doing: node facts, jobs,
// ranks and the tensors still waiting for ranks.
//
// Thread-safety: thread-safe; reads snapshots from the registry.
#pragma once

#include <functional>
#include <string>

#include "absl/time/time.h"
#include "daemon/job_registry.h"
#include "proto/kolo/v1/status.grpc.pb.h"

namespace kolo::daemon {

struct NodeFacts {
  std::string version;
  std::string socket_path;
  uint64_t fusion_threshold_bytes = 0;
  int worker_threads = 0;
  absl::Time started;
};

class StatusService final : public kolo::v1::Status::Service {
 public:
  // `registry` must outlive the service; `sessions` counts live sessions.
  StatusService(const JobRegistry* registry, NodeFacts facts,
                std::function<int()> sessions)
      : registry_(registry), facts_(std::move(facts)),
        sessions_(std::move(sessions)) {}

  grpc::Status GetStatus(grpc::ServerContext* context,
                         const kolo::v1::GetStatusRequest* request,
                         kolo::v1::GetStatusResponse* response) override;

 private:
  const JobRegistry* const registry_;
  const NodeFacts facts_;
  const std::function<int()> sessions_;
};

}  // namespace kolo::daemon
