// NodeService: kolo.v1.Node — clients attach (one long-lived stream per
// session), detach, and start and stop their job's timeline. The Attach
// handler owns its session: it opens it, keeps it while the stream lives,
// and closes it when the stream ends, which is how kolod learns that a
// client process died. The other calls name a session by its id.
//
// Thread-safety: thread-safe; gRPC calls handlers on its own threads and
// they share only the registry and the session index (mutex-guarded).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/call_deadlines.h"
#include "common/job_token_rule.h"
#include "daemon/job/job_registry.h"
#include "daemon/session/handoff_table.h"
#include "daemon/session/session.h"
#include "proto/kolo/v1/node.grpc.pb.h"

namespace kolo::daemon {

// What one attaching client may ask for; each bound is answered with
// INVALID_ARGUMENT or RESOURCE_EXHAUSTED while kolod keeps serving.
struct AttachPolicy {
  int max_job_ranks = 65536;
  int max_sessions = 1024;
  int max_sessions_per_uid = 256;
  // Attach calls of one user that have not yet sent their AttachRequest.
  int max_pending_attaches = 64;
  absl::Duration attach_timeout = absl::Seconds(10);
  // A job token must have at least this many characters (32 hex digits are
  // 128 bits) unless weak tokens are allowed (a single-user node).
  size_t min_job_token_chars = kMinJobTokenChars;
  bool allow_weak_job_tokens = false;
  // The most events a job's timeline may hold (JobTimeline START; 0 asks
  // for this many). Each costs kolod some 200 bytes until the stop.
  uint64_t max_job_timeline_events = Timeline::kDefaultMaxEvents;
};

struct NodeServiceOptions {
  SessionLimits limits;
  AttachPolicy policy;
  std::string version;
  // Offer one-node jobs' sessions access to their ranks' memory, for
  // callers whose uid is caller_memory_uid (kolod's own).
  bool caller_memory = true;
  uid_t caller_memory_uid = 0;
};

// The bytes of AttachRequest.caller_memory_probe.
inline constexpr size_t kCallerMemoryProbeBytes = 16;

class NodeService final : public kolo::v1::Node::Service {
 public:
  // `registry` and `handoffs` must outlive the service.
  NodeService(JobRegistry* registry, HandoffTable* handoffs, NodeServiceOptions options)
      : registry_(registry), handoffs_(handoffs), options_(std::move(options)) {}

  grpc::Status Attach(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<kolo::v1::DaemonMessage, kolo::v1::ClientMessage>* stream) override;
  grpc::Status Detach(grpc::ServerContext* context, const kolo::v1::DetachRequest* request,
                      kolo::v1::DetachResponse* response) override;
  // Starts or stops the timeline of the session's job (see node.proto).
  grpc::Status JobTimeline(grpc::ServerContext* context,
                           const kolo::v1::JobTimelineRequest* request,
                           kolo::v1::JobTimelineResponse* response) override;
  // An elastic job's epoch and joiners, for the session's rank (node.proto).
  grpc::Status ElasticStatus(grpc::ServerContext* context,
                             const kolo::v1::ElasticStatusRequest* request,
                             kolo::v1::ElasticStatusResponse* response) override;
  grpc::Status JobAutotune(grpc::ServerContext* context,
                           const kolo::v1::JobAutotuneRequest* request,
                           kolo::v1::JobAutotuneResponse* response) override;

  int sessions() const;

 private:
  // Whether kolod may reach this client's tensors in its own memory: a
  // one-node job, the kernel named the process, and the probe's bytes are
  // where the client says.
  bool CallerMemoryProven(const kolo::v1::AttachRequest& req, uid_t caller_uid,
                          const CallerMemory* memory) const;
  struct Entry {
    std::shared_ptr<Session> session;
    std::shared_ptr<Job> job;  // the job the session joined
    int rank = 0;
    uid_t uid = 0;
    std::atomic<bool> clean{false};
    std::atomic<bool> rejoin{false};  // detached to attach for the next epoch
  };
  // Where an attach landed in its job.
  struct Seat {
    std::shared_ptr<Job> job;
    int rank = 0;
    int size = 0;
    int local_rank = 0;
    int local_size = 0;
    uint64_t epoch = 0;
  };
  // The entry of `session_id`, or null.
  std::shared_ptr<Entry> FindSession(const std::string& session_id) const;
  // Reads and checks the first message and redeems its ticket.
  struct Admitted {
    kolo::v1::AttachRequest request;
    Handoff handoff;
  };
  absl::StatusOr<Admitted> Admit(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<kolo::v1::DaemonMessage, kolo::v1::ClientMessage>* stream);
  // Counts a session for `uid` against the limits; RESOURCE_EXHAUSTED when
  // full. Release undoes it.
  absl::Status Reserve(uid_t uid);
  void Release(uid_t uid);

  JobRegistry* const registry_;
  HandoffTable* const handoffs_;
  const NodeServiceOptions options_;
  CallDeadlines deadlines_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> sessions_ ABSL_GUARDED_BY(mu_);
  int reserved_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uid_t, int> pending_attaches_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uid_t, int> per_uid_ ABSL_GUARDED_BY(mu_);
};

// Checks an AttachRequest's fields against `policy`; the message names the
// bad field.
absl::Status ValidateAttachRequest(const kolo::v1::AttachRequest& request,
                                   const AttachPolicy& policy);

}  // namespace kolo::daemon
