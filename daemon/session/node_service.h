// NodeService: kolo.v1.Node — clients attach (one long-lived stream per
// session) and detach. The Attach handler owns its session: it opens it, keeps
// it while the stream lives, and closes it when the stream ends, which is how
// kolod learns that a client process died.
//
// Thread-safety: thread-safe; gRPC calls handlers on its own threads and
// they share only the registry and the session index (mutex-guarded).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "daemon/job/job_registry.h"
#include "daemon/session/session.h"
#include "proto/kolo/v1/node.grpc.pb.h"

namespace kolo::daemon {

struct NodeServiceOptions {
  SessionLimits limits;
  uint64_t fusion_threshold_bytes = 0;
  std::string version;
};

class NodeService final : public kolo::v1::Node::Service {
 public:
  // `registry` must outlive the service.
  NodeService(JobRegistry* registry, NodeServiceOptions options)
      : registry_(registry), options_(std::move(options)) {}

  grpc::Status Attach(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<kolo::v1::DaemonMessage, kolo::v1::ClientMessage>* stream) override;
  grpc::Status Detach(grpc::ServerContext* context, const kolo::v1::DetachRequest* request,
                      kolo::v1::DetachResponse* response) override;

  int sessions() const;

 private:
  struct Entry {
    std::shared_ptr<Session> session;
    std::atomic<bool> clean{false};
  };

  JobRegistry* const registry_;
  const NodeServiceOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> sessions_ ABSL_GUARDED_BY(mu_);
};

// Checks an AttachRequest's fields; the message names the bad field.
absl::Status ValidateAttachRequest(const kolo::v1::AttachRequest& request);

}  // namespace kolo::daemon
