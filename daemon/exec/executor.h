// Executor: runs one job's planned steps, one at a time and in plan order
// (the negotiator guarantees a single caller at a time). For each collective
// it picks the backend: the step's host backend for host tensors, the job's
// device backend for device tensors (made here when the step that carries
// the job's device communicator runs). It completes every request, feeds
// metrics and the timelines (the node's and the job's), and tells the job
// what ran (JobState) for its counters, flight recorder and stall reports.
// Control steps (process-set changes, the end of a join) go to the job's
// state in plan order.
//
// Thread-safety: Run and Fail are called by the negotiator's draining thread
// only; ReleaseSession and Abort may be called from any thread, also while a
// step runs.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/backend/device_backend.h"
#include "daemon/exec/session_results.h"
#include "daemon/negotiation/negotiator.h"
#include "daemon/observe/metrics.h"
#include "daemon/observe/timeline.h"

namespace kolo::daemon {

// What the executor reports to its job, in plan order: events only. The
// executor asks nothing of the job; why the job ended it learns from
// Executor::Abort, which the job calls before it stops its negotiator.
class ExecutorEvents {
 public:
  virtual ~ExecutorEvents() = default;
  // A process-set change every node agreed on ran (add: as `new_set`); the
  // job registers or drops the set and completes the requests of `sets`.
  virtual void ProcessSetChanged(std::vector<ReadySet> sets, int new_set) = 0;
  // Every rank has joined (`last_joined` last): the job completes the join
  // requests and resets its joined state.
  virtual void JoinCompleted(std::vector<ReadySet> sets, int last_joined) = 0;
  // This node cannot go on (`why`): the job ends, here and on the others.
  virtual void CannotContinue(const absl::Status& why) = 0;
  // The job's negotiator learned that the other nodes ended the job.
  virtual void EndedByPeers(const absl::Status& why) = 0;
  // A response failed because the link to another node broke
  // (common/link_lost.h). Returns the status its requests fail with; an
  // elastic job ends its epoch there, as the Peer plane's report of the lost
  // node would.
  virtual absl::Status LinkLost(const absl::Status& why) { return why; }
  // A response started on `backend` (stall reports name it while it runs).
  virtual void Started(const std::string& name, CollectiveKind kind, const std::string& backend,
                       absl::Time since) = 0;
  // A response ran (or failed) from `start` to `end`: counters, flight
  // recorder. Its requests are completed already.
  virtual void Finished(const std::vector<const ReadySet*>& sets, const absl::Status& status,
                        absl::Time start, absl::Time end) = 0;
  // A name the plan refused (its ranks or nodes disagreed): flight recorder.
  virtual void Refused(const ReadySet& set, const absl::Status& why) = 0;
};

struct ExecutorOptions {
  std::string job_id;
  std::string node_name;       // for messages
  Metrics* metrics = nullptr;  // may be null
  // Where each collective's phases go while they record: the node's
  // timeline (every job, for the operator) and the job's own (its ranks on
  // this node, for them). Either may be null.
  Timeline* node_timeline = nullptr;
  Timeline* job_timeline = nullptr;
  // Makes the job's device backend; null: device tensors fail with
  // UNIMPLEMENTED.
  DeviceBackendFactory* device_backends = nullptr;
};

class Executor final : public StepRunner {
 public:
  // `events` must outlive the executor.
  Executor(ExecutorOptions options, ExecutorEvents* events);

  void Run(PlannedStep step) override;
  void Fail(std::vector<ReadySet> sets, const absl::Status& status) override;
  void AbortJob(const absl::Status& why) override { events_->EndedByPeers(why); }

  // The session's cached device mappings go (after its requests failed).
  void ReleaseSession(const std::string& session_id);
  // The job ended (`why`): from now on every failure says so; a device
  // backend still joining its communicator gives up, and one that runs
  // aborts its communicators.
  void Abort(const absl::Status& why);

 private:
  void RunCollective(PlannedStep& step);
  void RunRefused(PlannedStep& step);
  // This node's ranks all joined: it takes part without tensors.
  void RunJoined(PlannedStep& step);
  // The device backend, made from the step's communicator if none exists.
  absl::StatusOr<Backend*> DeviceBackendFor(const PlannedStep& step);
  absl::Status ExecuteResponse(Response& response, const StepContext& context,
                               absl::StatusOr<Backend*> backend);
  // A response's phases into the timelines that record (before its
  // completions are delivered).
  void Trace(const std::vector<const ReadySet*>& sets, absl::Time start, absl::Time end,
             const std::string& backend);
  // Metrics and the job's events (after they were delivered).
  void Record(const std::vector<const ReadySet*>& sets, const absl::Status& status,
              absl::Time start, absl::Time end);
  // Why the job ended (Abort), or OK while it runs.
  absl::Status AbortStatus() const;
  // The timelines recording now (none, the node's, the job's or both).
  absl::InlinedVector<Timeline*, 2> RecordingTimelines() const;

  const ExecutorOptions options_;
  ExecutorEvents* const events_;
  SessionResults results_;  // where backends put new tensors

  // The device backend: made on the draining thread, then kept for the
  // job's life.
  absl::Mutex device_mu_;
  std::unique_ptr<DeviceBackend> device_backend_ ABSL_GUARDED_BY(device_mu_);
  absl::Status device_error_ ABSL_GUARDED_BY(device_mu_);  // why it could not be made
  // Set with device_backend_, for Abort (device_mu_ may be held for long
  // while an NCCL communicator is being joined).
  std::atomic<DeviceBackend*> device_backend_ptr_{nullptr};
  // Set by Abort: a device backend still joining its communicator gives up.
  std::atomic<bool> device_cancel_{false};
  // Why the job was aborted (set before device_cancel_), for a device
  // backend made after the abort.
  mutable absl::Mutex abort_mu_;
  absl::Status abort_why_ ABSL_GUARDED_BY(abort_mu_);
};

}  // namespace kolo::daemon
