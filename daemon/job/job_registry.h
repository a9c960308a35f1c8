// JobRegistry: the jobs of this node by owner and id. A job exists while at
// least one of its ranks is attached. Jobs are keyed by (uid, job id), the
// uid being the attaching process's as the kernel reported it, so one user
// can never see, join, squat or abort another user's job; within one user
// the job token separates jobs that share an id.
//
// Thread-safety: thread-safe (one mutex around the map; jobs lock themselves).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/backend/backend.h"
#include "daemon/job/elastic_group.h"
#include "daemon/job/job.h"

namespace kolo::daemon {

// How elastic jobs wait (kolod's flags).
struct ElasticLimits {
  // An attach waits this long for its epoch to form.
  absl::Duration timeout = absl::Seconds(600);
  // A rank that detached to rejoin is waited for this long.
  absl::Duration rejoin_grace = absl::Seconds(10);
};

struct JoinRequest {
  uid_t uid = 0;  // the attaching process's, from the kernel
  std::string job_id;
  std::string job_token;
  int rank = 0;
  int size = 0;
  std::string session_id;
  int64_t pid = 0;
  int local_size = 0;              // 0: every rank is local
  std::string coordinator;         // multi-node: the coordinator's peer address
  kolo::v1::JobSettings settings;  // as the rank asks for them
};

class JobRegistry {
 public:
  // `backend`, `device_backends` (may be null: device requests then fail)
  // and the observers must outlive the registry. Each job's negotiator comes
  // from `negotiators` (kolod: DefaultNegotiators()).
  JobRegistry(Backend* backend, uint64_t fusion_threshold_bytes, NegotiatorFactory negotiators,
              JobObservers observers = {}, MultiNodeEnv multi_node = {},
              DeviceBackendFactory* device_backends = nullptr, JobLimits limits = {},
              ElasticLimits elastic = {})
      : backend_(backend),
        negotiators_(std::move(negotiators)),
        device_backends_(device_backends),
        fusion_threshold_(fusion_threshold_bytes),
        observers_(observers),
        multi_node_(std::move(multi_node)),
        limits_(limits),
        elastic_limits_(elastic) {}

  // Creates the job on its first rank, or joins it: the token and size must
  // match the job's, and the rank must be free. A job that was aborted (one
  // of its ranks shut down or died) is started again by the next attach with
  // its token: a fresh incarnation under the same id, which the ranks still
  // attached to the old one join only by attaching again.
  absl::StatusOr<std::shared_ptr<Job>> Join(const JoinRequest& request);
  // Joins an elastic job (one node): waits until an epoch with this rank
  // forms (elastic_group.h), up to the elastic timeout or until `cancelled`
  // says the caller went away. `request.rank` and `.size` are hints.
  absl::StatusOr<ElasticSeat> JoinElastic(const JoinRequest& request, const ElasticJoin& join,
                                          const std::function<bool()>& cancelled);
  // The rank's session ended; the job (of `uid`, which joined it) is dropped
  // when its last rank leaves. `rejoin`: an elastic job's rank detached to
  // attach again for the next epoch.
  void Leave(const std::shared_ptr<Job>& job, uid_t uid, int rank, bool clean,
             const absl::Status& why, bool rejoin = false);
  // An elastic job's current epoch and the ranks waiting to join it; an
  // empty view for a job that is not elastic.
  ElasticView Elastic(uid_t uid, const std::string& job_id) const;
  // An elastic job's epochs so far, oldest first (empty for other jobs).
  std::vector<EpochRecord> Epochs(uid_t uid, const std::string& job_id) const;

  struct OwnedJob {
    uid_t uid = 0;
    std::shared_ptr<Job> job;
  };
  // Every job's snapshot, with its owner.
  std::vector<JobSnapshot> Snapshot() const;
  // The jobs named `job_id` (one per uid that runs one).
  std::vector<OwnedJob> Find(const std::string& job_id) const;
  std::vector<OwnedJob> Owned() const;
  std::vector<std::shared_ptr<Job>> Jobs() const;
  int size() const;

  // While draining, ranks of running jobs may still attach but no new job
  // starts.
  void SetDraining(bool draining);
  bool draining() const;

 private:
  // A new job (incarnation) as `request` lays it out; INVALID_ARGUMENT for
  // settings kolod refuses.
  absl::StatusOr<std::shared_ptr<Job>> MakeJob(const JoinRequest& request) const;
  // `layout` with the job settings `asked` resolved under kolod's bounds.
  absl::Status SetSettings(const kolo::v1::JobSettings& asked, JobLayout* layout) const;

  Backend* const backend_;
  const NegotiatorFactory negotiators_;
  DeviceBackendFactory* const device_backends_;
  const uint64_t fusion_threshold_;
  const JobObservers observers_;
  const MultiNodeEnv multi_node_;
  const JobLimits limits_;
  const ElasticLimits elastic_limits_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  mutable absl::Mutex mu_;
  using Key = std::pair<uid_t, std::string>;
  absl::flat_hash_map<Key, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  // Elastic jobs' memberships; jobs_ holds each one's current epoch.
  absl::flat_hash_map<Key, std::shared_ptr<ElasticGroup>> elastic_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kolo::daemon
