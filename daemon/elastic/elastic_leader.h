// ElasticLeaders: the membership leader of elastic jobs that span nodes, on
// the daemon that leads them (Peer.Rendezvous). Each daemon of such a job
// reports the ranks it has waiting for the next epoch (its survivors, once
// every local rank of the ended epoch reset or is gone, and its joiners) and
// polls; the leader forms the epoch:
//   - the first one once the reported ranks reach the job's initial size;
//   - a later one once some node reports survivors of the ended epoch (its
//     ranks reset) and every node of that epoch has reported or is lost (no
//     report within `lost_after` of the first), at least min size ranks
//     wait, and the reporting nodes hold a quorum of the ended epoch's
//     nodes: a strict majority, or exactly half including the ended epoch's
//     leader. Two sides of a partition can never both hold one, so the job
//     cannot split in two; a successor (the ended leader is lost) needs a
//     strict majority.
// Ranks are numbered as on one node (elastic_group.h): survivors by their
// previous rank, then the first epoch's ranks by the rank they asked for,
// then joiners in the order their nodes reported them. The node hosting
// rank 0 coordinates the epoch and leads the next formation.
//
// Thread-safety: thread-safe; a Report call may wait (briefly) for a
// formation.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon {

struct ElasticLeaderOptions {
  // A node of the ended epoch that has not reported this long after the
  // first report of the change is lost (the peer timeout).
  absl::Duration lost_after = absl::Seconds(10);
  // How long a Report call waits for a formation before it answers "not
  // yet".
  absl::Duration poll = absl::Milliseconds(500);
  // Whether the daemon at a Peer address refuses connections now (it died;
  // a fast check). A node of the ended epoch that has not reported and
  // refuses is lost at once instead of after `lost_after`. May be null.
  std::function<bool(const std::string& address)> refuses;
  // Bounds on what reports may make the leader hold.
  int max_jobs = 1024;
  int max_candidates = 65536;
};

// One job's leader.
class ElasticLeader {
 public:
  ElasticLeader(std::string job_id, std::string token, ElasticLeaderOptions options);

  const std::string& token() const { return token_; }
  // Takes `report` (replacing the node's earlier one) and answers with the
  // node's part of a formed epoch, or epoch 0 when none formed within the
  // poll time. FAILED_PRECONDITION when the quorum rule refuses the epoch.
  absl::StatusOr<kolo::v1::ElasticFormed> Report(const kolo::v1::ElasticReport& report);
  // Nothing reported or formed for a while: the registry may drop it.
  bool Idle(absl::Time now) const;
  // Joiners nodes other than `here` reported lately (they poll while they
  // wait).
  int JoinersWaiting(absl::Time now, const std::string& here) const;

 private:
  struct NodeReport {
    kolo::v1::ElasticReport report;
    absl::Time at;    // of the node's first report of this change
    absl::Time last;  // of its latest poll
    uint64_t order = 0;
  };
  void MaybeFormLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether some node reported that the current epoch ended.
  bool EndReportedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // No epoch forms: the nodes that reported get `why`.
  void RefuseLocked(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks whether the ended epoch's silent nodes refuse connections (unlocks
  // mu_ while it asks).
  void ProbeMissingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FormLocked(absl::Time now, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a candidate continues the ended epoch.
  bool SurvivorLocked(const kolo::v1::ElasticCandidate& c) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string job_id_;
  const std::string token_;
  const ElasticLeaderOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // a formation or a refusal
  // The last epoch formed (or adopted from a report: a successor), its nodes
  // and its leader's node name.
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<kolo::v1::ElasticNode> nodes_ ABSL_GUARDED_BY(mu_);
  std::string leader_ ABSL_GUARDED_BY(mu_);
  int initial_size_ ABSL_GUARDED_BY(mu_) = 0;
  int min_size_ ABSL_GUARDED_BY(mu_) = 1;
  int max_size_ ABSL_GUARDED_BY(mu_) = 0;
  // Reports for the next epoch, by node name.
  std::map<std::string, NodeReport> reports_ ABSL_GUARDED_BY(mu_);
  uint64_t reports_seen_ ABSL_GUARDED_BY(mu_) = 0;
  // The answers of the last formation, by node name, until each node took
  // its own.
  std::map<std::string, kolo::v1::ElasticFormed> results_ ABSL_GUARDED_BY(mu_);
  // Why the last formation was refused, for the nodes that reported to it.
  absl::Status refused_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool> refused_nodes_ ABSL_GUARDED_BY(mu_);
  absl::Time last_activity_ ABSL_GUARDED_BY(mu_);
  // This change's nodes asked about, and those found gone.
  std::set<std::string> probed_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> gone_ ABSL_GUARDED_BY(mu_);
};

// The jobs whose elastic group spans nodes from this daemon (any of them
// may be asked to lead a formation), by job id and token.
// Thread-safety: thread-safe.
class ExpectedElasticJobs {
 public:
  // Adds one; returns its serial for Remove.
  uint64_t Add(const std::string& job_id, const std::string& token);
  void Remove(const std::string& job_id, uint64_t serial);
  bool Has(const std::string& job_id, const std::string& token) const;

 private:
  struct Entry {
    uint64_t serial = 0;
    std::string token;
  };
  mutable absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, std::vector<Entry>> jobs_ ABSL_GUARDED_BY(mu_);
};

// The leaders this daemon runs, by job id and token.
class ElasticLeaders {
 public:
  explicit ElasticLeaders(ElasticLeaderOptions options)
      : options_(std::move(options)), expected_(std::make_shared<ExpectedElasticJobs>()) {}

  // Marks a job as one this daemon takes reports for while the returned
  // handle lives (its elastic group here spans nodes). Peer.Rendezvous
  // reads nothing of a call whose metadata names a job that is neither
  // expected nor led here, so a peer that is no node of any elastic job
  // costs no more than its call's headers.
  class Expected {
   public:
    Expected(std::shared_ptr<ExpectedElasticJobs> jobs, std::string job_id, uint64_t serial)
        : jobs_(std::move(jobs)), job_id_(std::move(job_id)), serial_(serial) {}
    ~Expected() { jobs_->Remove(job_id_, serial_); }
    Expected(const Expected&) = delete;
    Expected& operator=(const Expected&) = delete;

   private:
    std::shared_ptr<ExpectedElasticJobs> jobs_;
    std::string job_id_;
    uint64_t serial_;
  };
  std::shared_ptr<Expected> Expect(const std::string& job_id, const std::string& token);
  // Whether a report naming (job_id, token) is read: the job is expected,
  // or a leader for it runs here.
  bool Knows(const std::string& job_id, const std::string& token);

  // Validates and takes one report (Peer.Rendezvous).
  absl::StatusOr<kolo::v1::ElasticFormed> Report(const kolo::v1::ElasticReport& report);
  // Joiners nodes other than `here` (this daemon's node) have waiting for
  // the next epoch of a job this daemon leads (0 when it leads none such).
  int JoinersWaiting(const std::string& job_id, const std::string& token, const std::string& here);

 private:
  // The leader of (job_id, token), or null.
  std::shared_ptr<ElasticLeader> FindLocked(const std::string& job_id,
                                            const std::string& token) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ElasticLeaderOptions options_;
  // Shared with the Expected handles, which may outlive this.
  const std::shared_ptr<ExpectedElasticJobs> expected_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<std::shared_ptr<ElasticLeader>>> leaders_
      ABSL_GUARDED_BY(mu_);
};

// Checks a leader's answer before node `node` acts on it (sizes, every rank
// on exactly one node, `node`'s placements among its ranks, bounded
// strings); the message names the bad field.
absl::Status ValidateElasticFormed(const kolo::v1::ElasticFormed& formed, const std::string& node);

// Checks a report's fields and bounds; the message names the bad one.
absl::Status ValidateElasticReport(const kolo::v1::ElasticReport& report, int max_candidates);

}  // namespace kolo::daemon
