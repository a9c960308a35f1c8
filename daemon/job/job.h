// Job: the state of one training job on this node — its ranks, the request
// table, process sets and join state — and the admission of requests. A
// name every local rank submitted (and agreed on) goes to the job's
// negotiator, which plans it (alone on one node, with the coordinator
// across nodes) and runs the plan on the job's executor.
//
// Thread-safety: thread-safe; the mutable state is guarded by mu_ (a job is
// reached from several ingress threads, and a mutex costs less than posting
// every request to an owner thread on this latency-bound path). The lock
// order is mu_, then the negotiator's locks.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/device_backend.h"
#include "daemon/exec/executor.h"
#include "daemon/job/ingress_group.h"
#include "daemon/job/job_layout.h"
#include "daemon/job/negotiator_factory.h"
#include "daemon/job/request_table.h"
#include "daemon/negotiation/negotiator.h"
#include "daemon/observe/flight_recorder.h"
#include "daemon/observe/metrics.h"
#include "daemon/observe/timeline.h"
#include "daemon/plan/join_tracker.h"
#include "daemon/plan/process_set_registry.h"
#include "daemon/transport/transport.h"

namespace kolo::daemon {

struct RankSnapshot {
  int rank = 0;
  std::string session_id;
  int64_t pid = 0;
  uint64_t submitted = 0;
  uint64_t completed = 0;
  bool attached = false;
  absl::Time last_submit = absl::InfinitePast();
  absl::Time last_complete = absl::InfinitePast();
};

// A tensor that has waited longer than the stall warning: either some ranks
// never submitted it, or every rank did and its execution is stuck.
struct StallView {
  std::string name;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  std::vector<int> submitted;
  std::vector<int> missing;
  absl::Duration waiting;
  bool executing = false;
  // Every rank of this node submitted it: it waits for other nodes only.
  bool remote = false;
  absl::Time since;  // identifies this stall across inspections
  // e.g. allreduce "grad/w1" waiting 61 s for ranks 3,7 (submitted: 0-2,4-6)
  std::string message;
};

// Where a job reports what it does; any member may be null.
struct JobObservers {
  Metrics* metrics = nullptr;
  Timeline* timeline = nullptr;
  size_t flight_records = 256;
  size_t flight_errors = 32;
};

// One membership change of an elastic job: epoch `epoch` formed.
struct EpochRecord {
  uint64_t epoch = 0;
  absl::Time at;
  int size = 0;
  std::string reason;       // why the previous epoch ended ("started" first)
  std::vector<int> joined;  // ranks of this epoch that are new
  int left = 0;             // ranks of the previous epoch not in this one
};

struct JobSnapshot {
  std::string job_id;
  uid_t uid = 0;  // the owner (filled by the registry)
  int size = 0;
  uint64_t epoch = 0;               // elastic jobs; 0 otherwise
  std::vector<EpochRecord> epochs;  // elastic jobs, oldest first (registry)
  bool aborted = false;
  std::string error;
  std::vector<RankSnapshot> ranks;
  std::vector<PendingView> pending;
  uint64_t responses = 0;
  uint64_t fused_tensors = 0;
  uint64_t bytes_reduced = 0;
  uint64_t data_plane_negotiation = 0;  // Negotiator::data_plane_messages
  absl::Time created;
  std::vector<CollectiveRecord> recent;  // oldest first
  std::vector<std::string> errors;       // oldest first
};

// A job holds its state and admits requests; its negotiator decides the
// order in which ready names run (on one node: at once, on the calling
// thread; across nodes: as the coordinator plans), and its executor runs them
// (daemon/exec/executor.h). The life of a request is in docs/internals.md.
class Job final : public ExecutorEvents, public RequestSink {
 public:
  // `backend` (host tensors on one node) and `device_backends` must outlive
  // the job. Responses over device tensors run on a device backend the
  // executor makes from `device_backends` when the job's first one runs;
  // without a factory they fail with UNIMPLEMENTED. The job's negotiator
  // comes from `negotiators` (called once, here).
  Job(std::string id, std::string token, int size, Backend* backend,
      uint64_t fusion_threshold_bytes, const NegotiatorFactory& negotiators,
      JobObservers observers = {}, JobLayout layout = {},
      DeviceBackendFactory* device_backends = nullptr);
  ~Job() override;

  // Whether the job's negotiator works with other daemons (the job spans
  // nodes).
  bool spans_nodes() const { return negotiator_->has_peers(); }
  // The job's membership epoch; 0 when it is not elastic.
  uint64_t elastic_epoch() const { return layout_.elastic_epoch; }
  // Once every local rank has attached: starts the job's negotiator (across
  // nodes: connects to the job's coordinator, blocking up to the connect
  // timeout; a failure aborts the job). Names become ready only after that.
  void MaybeStart();

  const std::string& id() const { return id_; }
  const std::string& token() const { return token_; }
  // The job's settings as its first rank here asked for them, and the
  // fusion threshold they put in force here.
  const kolo::v1::JobSettings& asked_settings() const { return layout_.asked_settings; }
  uint64_t fusion_threshold_bytes() const { return layout_.settings.fusion_threshold_bytes; }
  // The job's fusion tuner (Negotiator::Autotune).
  absl::StatusOr<plan::TunerReport> Autotune(uint32_t since) const {
    return negotiator_->Autotune(since);
  }
  // The job's own timeline: the phases of its collectives on this node
  // (only its ranks attached here), recorded beside the node's timeline of
  // JobObservers and started and stopped by the job's ranks through
  // NodeService::JobTimeline. Lives as long as the job.
  Timeline& timeline() { return timeline_; }
  int size() const override { return size_; }

  // Registers rank `rank` as attached (by `session_id`, process `pid`).
  // ALREADY_EXISTS if that rank is attached; ABORTED if the job was aborted.
  absl::Status AttachRank(int rank, const std::string& session_id, int64_t pid);
  // The rank's session ended (clean: it detached; else it died or misbehaved
  // with `why`). Aborts the job for the remaining ranks. Returns the number
  // of ranks still attached.
  int RankLeft(int rank, bool clean, const absl::Status& why);

  // Takes one validated request of an attached rank.
  void Submit(Request request) override;
  void Accept(Request request) override;
  void Progress() override;
  IngressGroup* ingress_group() override { return &ingress_group_; }
  // Members (global ranks) of a process set; NOT_FOUND if it does not exist.
  absl::StatusOr<std::vector<int>> ProcessSetMembers(int process_set) const;
  // Fails every pending and future collective with `status`.
  void Abort(const absl::Status& status);
  // The same, when the job's negotiator learned the other nodes ended it.
  void AbortFromPeers(const absl::Status& why);
  // Why the job ended, or OK while it runs.
  absl::Status AbortStatus() const;

  // `with_history` adds the flight recorder's records and errors.
  JobSnapshot Snapshot(bool with_history = false) const;
  // Tensors waiting (or executing) longer than `warning` at `now`.
  std::vector<StallView> Stalls(absl::Time now, absl::Duration warning) const;

  // ExecutorEvents: what the executor reports, in plan order.
  void ProcessSetChanged(std::vector<ReadySet> sets, int new_set) override;
  void JoinCompleted(std::vector<ReadySet> sets, int last_joined) override;
  void CannotContinue(const absl::Status& why) override { Abort(why); }
  void EndedByPeers(const absl::Status& why) override { AbortFromPeers(why); }
  absl::Status LinkLost(const absl::Status& why) override;
  void Started(const std::string& name, CollectiveKind kind, const std::string& backend,
               absl::Time since) override;
  void Finished(const std::vector<const ReadySet*>& sets, const absl::Status& status,
                absl::Time start, absl::Time end) override;
  void Refused(const ReadySet& set, const absl::Status& why) override;

 private:
  // Why `request` may not enter the request table, or OK.
  absl::Status AdmitLocked(const Request& request) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The local ranks of `process_set` that have not joined (a name is ready
  // once they all submitted it); none before the negotiator started.
  std::vector<int> RequiredLocked(int process_set) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same, whether or not the negotiator started (for stall reports).
  std::vector<int> ExpectedLocked(int process_set) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Names whose required ranks all submitted go to the negotiator.
  void TakeReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A name became ready here: checked, then handed to the negotiator
  // (grouped ones once their whole group is ready).
  void OnReadyLocked(ReadySet set) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRunnableLocked(const ReadySet& set) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A second submission of a name this node has ready and not yet run.
  bool InFlightLocked(const Request& request) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void JoinLocked(Request request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every rank of this node has joined (and the negotiator runs): the
  // negotiator gets the node's join.
  void MaybeJoinedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string id_;
  const std::string token_;
  const int size_;
  const JobObservers observers_;
  const absl::Time created_;
  const JobLayout layout_;
  const int local_size_;  // ranks that attach here

  Timeline timeline_;  // before executor_, which records into it
  Executor executor_;
  IngressGroup ingress_group_;
  // Made in the constructor, destroyed first (its threads use the executor
  // and the job).
  std::unique_ptr<Negotiator> negotiator_;
  // negotiator_ for Abort, which its threads may call while ~Job resets it.
  std::atomic<Negotiator*> live_negotiator_{nullptr};

  mutable absl::Mutex mu_;
  RequestTable table_ ABSL_GUARDED_BY(mu_);
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<int, RankSnapshot> ranks_ ABSL_GUARDED_BY(mu_);
  int attached_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t responses_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t fused_tensors_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_reduced_ ABSL_GUARDED_BY(mu_) = 0;
  FlightRecorder recorder_ ABSL_GUARDED_BY(mu_);
  // Process sets by id; ids come from the plan. A set whose removal is
  // agreed here and not yet run in plan order takes no new names and cannot
  // be removed again.
  plan::ProcessSetRegistry sets_ ABSL_GUARDED_BY(mu_);
  // Join: who has joined, this node's pending join requests, the last to join.
  plan::JoinTracker joins_ ABSL_GUARDED_BY(mu_);  // ranks
  std::vector<Request> join_requests_ ABSL_GUARDED_BY(mu_);
  // Ready members of groups that are not complete yet, by (set, group id).
  std::map<std::pair<int, uint64_t>, std::vector<ReadySet>> groups_ ABSL_GUARDED_BY(mu_);
  // The response being executed, for stall reports: its first tensor's name
  // and kind, its backend, and since when.
  std::string executing_name_ ABSL_GUARDED_BY(mu_);
  CollectiveKind executing_kind_ ABSL_GUARDED_BY(mu_) = CollectiveKind::kAllreduce;
  std::string executing_backend_ ABSL_GUARDED_BY(mu_);
  absl::Time executing_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // The global ranks attached here, and whether the negotiator started (and
  // is starting: MaybeStart runs it without the lock).
  std::vector<int> local_ranks_ ABSL_GUARDED_BY(mu_);
  bool starting_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // A rank left without detaching (it died): the job did not end cleanly.
  bool unclean_leave_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kolo::daemon
