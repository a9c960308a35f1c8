// Job: the state of one training job on this node — its ranks, the request
// table, the queue of ready names and the order in which they execute.
//
// Dispatch is event-driven: the thread whose submission makes a name ready
// (an ingress thread) becomes the job's executor if none is running and
// drains the ready queue — fusing whatever became ready meanwhile — until it
// is empty; otherwise it leaves the name for the running executor. A small
// allreduce therefore costs one doorbell in, a reduction and one doorbell
// out, with no hand-off between threads and no polling cycle. Responses of a
// job run one at a time, in ready order, so every rank sees the same order.
//
// Thread-safety: thread-safe; the mutable state is guarded by mu_ (a job is
// reached from several ingress threads, and a mutex costs less than posting
// every request to an owner thread on this latency-bound path).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/device_backend.h"
#include "daemon/flight_recorder.h"
#include "daemon/metrics.h"
#include "daemon/request_table.h"
#include "daemon/timeline.h"

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
  absl::Time since;  // identifies this stall across inspections
  // e.g. allreduce "grad/w1" waiting 61 s for ranks 3,7 (submitted: 0-2,4-6)
  std::string message;
};

class CoordinatorRegistry;
class NodeGroup;

// What a job that spans nodes needs from its daemon.
struct MultiNodeEnv {
  std::string node_name;
  CoordinatorRegistry* coordinators = nullptr;
  absl::Duration peer_timeout = absl::Seconds(10);
};

// How the job is laid out: `local_size` of its ranks attach here; with fewer
// local ranks than ranks, or a coordinator address, the job spans nodes.
struct JobLayout {
  int local_size = 0;
  std::string coordinator;  // the peer address of the daemon hosting rank 0
  MultiNodeEnv env;
};

// Where a job reports what it does; any member may be null.
struct JobObservers {
  Metrics* metrics = nullptr;
  Timeline* timeline = nullptr;
  size_t flight_records = 256;
  size_t flight_errors = 32;
};

struct JobSnapshot {
  std::string job_id;
  int size = 0;
  bool aborted = false;
  std::string error;
  std::vector<RankSnapshot> ranks;
  std::vector<PendingView> pending;
  uint64_t responses = 0;
  uint64_t fused_tensors = 0;
  uint64_t bytes_reduced = 0;
  absl::Time created;
  std::vector<CollectiveRecord> recent;  // oldest first
  std::vector<std::string> errors;       // oldest first
};

class Job {
 public:
  // `backend` (for host tensors) and `device_backends` must outlive the job.
  // Responses over device tensors run on a device backend the job makes
  // from `device_backends` when its first one runs; without a factory they
  // fail with UNIMPLEMENTED.
  Job(std::string id, std::string token, int size, Backend* backend,
      uint64_t fusion_threshold_bytes, JobObservers observers = {},
      JobLayout layout = {}, DeviceBackendFactory* device_backends = nullptr);
  ~Job();

  bool multi_node() const { return multi_node_; }
  // Once every local rank of a multi-node job has attached: connects this
  // node to the job's coordinator (blocking, up to the connect timeout).
  // A failure aborts the job. Does nothing for one-node jobs.
  void MaybeStartNodeGroup();

  const std::string& id() const { return id_; }
  const std::string& token() const { return token_; }
  int size() const { return size_; }

  // Registers rank `rank` as attached (by `session_id`, process `pid`).
  // ALREADY_EXISTS if that rank is attached; ABORTED if the job was aborted.
  absl::Status AttachRank(int rank, const std::string& session_id, int64_t pid);
  // The rank's session ended (clean: it detached; else it died or misbehaved
  // with `why`). Aborts the job for the remaining ranks. Returns the number
  // of ranks still attached.
  int RankLeft(int rank, bool clean, const absl::Status& why);

  // Takes one validated request of an attached rank.
  void Submit(Request request);
  // Members (global ranks) of a process set; NOT_FOUND if it does not exist.
  absl::StatusOr<std::vector<int>> ProcessSetMembers(int process_set) const;
  // Fails every pending and future collective with `status`.
  void Abort(const absl::Status& status);

  // `with_history` adds the flight recorder's records and errors.
  JobSnapshot Snapshot(bool with_history = false) const;
  // Tensors waiting (or executing) longer than `warning` at `now`.
  std::vector<StallView> Stalls(absl::Time now, absl::Duration warning) const;

 private:
  using Outbox = std::vector<std::pair<Session*, Completion>>;

  void RunReady();
  // The backend of `response`: the host one, or for device tensors the
  // job's device backend (made on first use, its communicator planned here:
  // one node). Called by the executor only.
  absl::StatusOr<Backend*> BackendFor(const Response& response);
  // The device backend, made with `comm` if there is none yet.
  absl::StatusOr<Backend*> DeviceBackendFor(const DeviceCommPlan* comm,
                                            std::vector<int> local_ranks);
  // Runs one response and completes its requests (metrics, timeline and
  // flight recorder included). Returns the backend's overall status.
  absl::Status ExecuteResponse(Response& response, absl::StatusOr<Backend*> backend);
  // After a response ran: metrics, timeline, flight recorder and the ranks'
  // counters (single-node, device and node-group responses alike).
  void RecordExecuted(const std::vector<const ReadySet*>& sets, const absl::Status& status,
                      absl::Time start, absl::Time end, const std::string& backend_name);
  // Multi-node: every rank has joined; completes this node's join requests
  // with the last rank to join and resets the joined state.
  void JoinDone(std::vector<ReadySet> sets, int last_joined);
  // Multi-node: registers (new_set) or drops the process set every node
  // agreed on, in plan order, and completes the requests.
  void ChangeProcessSet(std::vector<ReadySet> sets, int new_set);
  // Multi-node: runs a planned response of device tensors (the node group's
  // executor thread calls this in plan order).
  void RunDeviceSets(std::vector<ReadySet> sets, const DeviceCommPlan* comm);
  void Fail(std::vector<Request> requests, const absl::Status& status);
  // Why `request` may not enter the request table, or OK.
  absl::Status AdmitLocked(const Request& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Members of `process_set` that have not joined.
  std::vector<int> RequiredLocked(int process_set) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A name became ready: control collectives complete here, the rest queue
  // for execution (grouped ones once their whole group is ready).
  void OnReadyLocked(ReadySet set, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRunnableLocked(const ReadySet& set) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends `set` to `to`, or, for a member of a group, holds it until the
  // whole group is ready and then appends every member.
  void ReleaseWhenGroupCompleteLocked(ReadySet set, std::vector<ReadySet>* to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void JoinLocked(Request request, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string id_;
  const std::string token_;
  const int size_;
  Backend* const backend_;
  const uint64_t fusion_threshold_;
  const JobObservers observers_;
  const absl::Time created_;
  const JobLayout layout_;
  const bool multi_node_;
  DeviceBackendFactory* const device_backends_;

  // The device backend: made by the executor, then kept for the job's life
  // (RankLeft releases a leaving session's IPC mappings through it).
  mutable absl::Mutex device_mu_;
  std::unique_ptr<DeviceBackend> device_backend_ ABSL_GUARDED_BY(device_mu_);
  absl::Status device_error_ ABSL_GUARDED_BY(device_mu_);  // why it could not be made
  // Set with device_backend_, for Abort (device_mu_ may be held for long
  // while an NCCL communicator is being joined).
  std::atomic<DeviceBackend*> device_backend_ptr_{nullptr};
  // Set by Abort: a device backend still joining its communicator gives up.
  std::atomic<bool> device_cancel_{false};

  mutable absl::Mutex mu_;
  // Orders deliveries of locally ready names to the node group (taken
  // while mu_ is held, then mu_ is released).
  absl::Mutex group_send_mu_ ABSL_ACQUIRED_AFTER(mu_);
  RequestTable table_ ABSL_GUARDED_BY(mu_);
  std::vector<ReadySet> ready_ ABSL_GUARDED_BY(mu_);
  bool executing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  std::vector<RankSnapshot> ranks_ ABSL_GUARDED_BY(mu_);
  int attached_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t responses_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t fused_tensors_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_reduced_ ABSL_GUARDED_BY(mu_) = 0;
  FlightRecorder recorder_ ABSL_GUARDED_BY(mu_);
  // Process sets by id; 0 is every rank. Ids are handed out in order.
  std::map<int, std::vector<int>> sets_ ABSL_GUARDED_BY(mu_);
  int next_set_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Join: who has joined, their pending join requests, the last to join.
  std::vector<bool> joined_ ABSL_GUARDED_BY(mu_);
  std::vector<Request> join_requests_ ABSL_GUARDED_BY(mu_);
  int last_joined_ ABSL_GUARDED_BY(mu_) = -1;
  // Ready members of groups that are not complete yet, by (set, group id).
  std::map<std::pair<int, uint64_t>, std::vector<ReadySet>> groups_
      ABSL_GUARDED_BY(mu_);
  // The response being executed, for stall reports: its first tensor's name
  // and kind, and since when.
  std::string executing_name_ ABSL_GUARDED_BY(mu_);
  CollectiveKind executing_kind_ ABSL_GUARDED_BY(mu_) = CollectiveKind::kAllreduce;
  std::string executing_backend_ ABSL_GUARDED_BY(mu_);
  absl::Time executing_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // Multi-node: the global ranks attached here, and names locally ready
  // that go to the node group once the lock is released.
  std::vector<int> local_ranks_ ABSL_GUARDED_BY(mu_);
  bool group_started_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<ReadySet> to_group_ ABSL_GUARDED_BY(mu_);
  // Set once, then only read; destroyed first (its threads call the job).
  std::unique_ptr<NodeGroup> group_;
  std::atomic<NodeGroup*> group_ptr_{nullptr};
};

}  // namespace kolo::daemon
