#include "daemon/exec/executor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/link_lost.h"
#include "daemon/exec/completions.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

std::vector<ReadySet> TakeSets(Response& response) {
  std::vector<ReadySet> sets;
  for (FusedMember& m : response.members) sets.push_back(std::move(m.set));
  response.members.clear();
  return sets;
}

}  // namespace

Executor::Executor(ExecutorOptions options, ExecutorEvents* events)
    : options_(std::move(options)), events_(events) {}

void Executor::Run(PlannedStep step) {
  switch (step.kind) {
    case PlannedStep::Kind::kProcessSetChange:
      if (!step.error.ok()) {
        RunRefused(step);
        return;
      }
      events_->ProcessSetChanged(TakeSets(step.response), step.new_process_set);
      return;
    case PlannedStep::Kind::kJoinDone:
      events_->JoinCompleted(TakeSets(step.response), step.last_joined);
      return;
    case PlannedStep::Kind::kCollective:
      if (!step.error.ok()) {
        RunRefused(step);
      } else if (step.context.joined_here) {
        RunJoined(step);
      } else {
        RunCollective(step);
      }
      return;
  }
}

void Executor::Fail(std::vector<ReadySet> sets, const absl::Status& status) {
  // Once the job ended, its requests fail with why it ended (to the ranks of
  // an elastic epoch that reads MEMBERSHIP_CHANGED: they reset).
  const absl::Status why = AbortStatus();
  CompleteAll(sets, why.ok() ? status : why);
}

absl::InlinedVector<Timeline*, 2> Executor::RecordingTimelines() const {
  absl::InlinedVector<Timeline*, 2> out;
  for (Timeline* t : {options_.node_timeline, options_.job_timeline}) {
    if (t != nullptr && t->recording()) out.push_back(t);
  }
  return out;
}

void Executor::RunRefused(PlannedStep& step) {
  const absl::Time now = absl::Now();
  const absl::InlinedVector<Timeline*, 2> timelines = RecordingTimelines();
  for (const FusedMember& m : step.response.members) {
    if (options_.metrics != nullptr) options_.metrics->RecordError(m.set.requests.front().kind);
    for (Timeline* timeline : timelines) {
      for (const Request& r : m.set.requests) {
        timeline->Span(options_.job_id, r.rank, m.set.name, "QUEUED", r.submitted_at,
                       m.set.ready_at);
        timeline->Span(options_.job_id, r.rank, m.set.name, "NEGOTIATED", m.set.ready_at, now);
        timeline->Instant(options_.job_id, r.rank, m.set.name, "DONE", now);
      }
    }
    events_->Refused(m.set, step.error);
  }
  CompleteAll(TakeSets(step.response), step.error);
}

void Executor::RunJoined(PlannedStep& step) {
  step.context.results = &results_;
  absl::Status s = step.host_backend == nullptr
                       ? absl::InternalError("no backend for host data between nodes")
                       : step.host_backend->Execute(step.response, step.context);
  if (!s.ok()) {
    // The other nodes counted on this one's zeros: end the job.
    events_->CannotContinue(absl::Status(
        s.code(),
        absl::StrCat("job ", options_.job_id, " on node ", options_.node_name, ": ", s.message())));
  }
}

void Executor::RunCollective(PlannedStep& step) {
  if (step.response.members.empty()) return;
  step.context.results = &results_;
  if (!step.response.on_device) {
    absl::StatusOr<Backend*> host = step.host_backend;
    if (step.host_backend == nullptr) {
      host = absl::InternalError(
          absl::StrCat("job ", options_.job_id, ": no backend for host tensors on this node"));
    }
    (void)ExecuteResponse(step.response, step.context, host);
    return;
  }
  absl::Status status = ExecuteResponse(step.response, step.context, DeviceBackendFor(step));
  if (!status.ok() && step.device_failure_ends_job) {
    // The job's communicator is unusable (or was never made here) and the
    // other daemons would wait in NCCL for this one until their deadline:
    // end the job on every node now.
    events_->CannotContinue(absl::Status(
        status.code(), absl::StrCat("job ", options_.job_id, ": device collective failed on node ",
                                    options_.node_name, ": ", status.message())));
  }
}

absl::StatusOr<Backend*> Executor::DeviceBackendFor(const PlannedStep& step) {
  if (DeviceBackend* made = device_backend_ptr_.load()) return made;
  absl::MutexLock l(&device_mu_);
  if (device_backend_ != nullptr) return device_backend_.get();
  if (!device_error_.ok()) return device_error_;
  if (options_.device_backends == nullptr) {
    device_error_ = absl::UnimplementedError(
        absl::StrCat("job ", options_.job_id, ": this kolod has no backend for device tensors"));
    return device_error_;
  }
  if (!step.device_comm.has_value()) {
    device_error_ = absl::InternalError(absl::StrCat(
        "job ", options_.job_id, ": a device response came before the job's NCCL communicator"));
    return device_error_;
  }
  auto made = options_.device_backends->Create(
      DeviceBackendOptions{options_.job_id, *step.device_comm, step.local_ranks, &device_cancel_});
  if (!made.ok()) {
    spdlog::warn("job {}: no device backend: {}", options_.job_id, made.status().ToString());
    device_error_ = made.status();
    return device_error_;
  }
  device_backend_ = *std::move(made);
  device_backend_ptr_.store(device_backend_.get());
  if (device_cancel_.load()) {
    // The job was aborted while the backend was being made: Abort may not
    // have seen it, so it learns why here (twice is harmless).
    if (absl::Status why = AbortStatus(); !why.ok()) device_backend_->Abort(why);
  }
  return device_backend_.get();
}

void Executor::ReleaseSession(const std::string& session_id) {
  absl::MutexLock l(&device_mu_);
  if (device_backend_ != nullptr) device_backend_->ReleaseSession(session_id);
}

absl::Status Executor::AbortStatus() const {
  absl::MutexLock l(&abort_mu_);
  return abort_why_;
}

void Executor::Abort(const absl::Status& why) {
  {
    absl::MutexLock l(&abort_mu_);
    if (abort_why_.ok()) abort_why_ = why;
  }
  device_cancel_.store(true);
  if (DeviceBackend* d = device_backend_ptr_.load()) d->Abort(why);
}

absl::Status Executor::ExecuteResponse(Response& response, const StepContext& context,
                                       absl::StatusOr<Backend*> backend) {
  const absl::Time start = absl::Now();
  const std::string backend_name =
      backend.ok() ? std::string((*backend)->name()) : std::string("none");
  events_->Started(response.members.front().set.name, response.kind, backend_name, start);
  absl::Status status = backend.ok() ? (*backend)->Execute(response, context) : backend.status();
  if (!status.ok()) {
    // A transfer cut short because the job ended: say why it ended (a
    // rank died, a node was lost), not how the transfer failed. A broken
    // link may be the first sign of a lost node: the job says what that
    // means to it.
    if (absl::Status why = AbortStatus(); !why.ok()) {
      status = why;
    } else if (IsLinkLost(status)) {
      status = events_->LinkLost(status);
    }
  }
  const absl::Time end = absl::Now();
  Outbox out;
  for (const FusedMember& m : response.members) {
    absl::Status member_status = status.ok() ? m.status : status;
    if (!member_status.ok()) {
      // Nobody will hand these back: free them here.
      for (size_t i = 0; i < m.results.size(); ++i) {
        m.set.requests[i].origin->ReleaseResult(m.results[i].offset);
      }
    }
    for (size_t i = 0; i < m.set.requests.size(); ++i) {
      const Request& r = m.set.requests[i];
      Completion c{r.request_id, member_status};
      if (member_status.ok() && i < m.results.size()) {
        c.result_offset = m.results[i].offset;
        c.result_bytes = m.results[i].bytes;
        c.value = m.results[i].value;
      }
      out.push_back({r.origin.get(), std::move(c)});
    }
  }
  std::vector<const ReadySet*> sets;
  for (const FusedMember& m : response.members) sets.push_back(&m.set);
  // Traced before the completions go out: a rank that stops a timeline as
  // soon as its collective returned finds the collective in it.
  Trace(sets, start, end, backend_name);
  Deliver(out);
  Record(sets, status, start, end);
  return status;
}

void Executor::Trace(const std::vector<const ReadySet*>& sets, absl::Time start, absl::Time end,
                     const std::string& backend) {
  const absl::InlinedVector<Timeline*, 2> timelines = RecordingTimelines();
  if (timelines.empty() || sets.empty()) return;
  const absl::Time done = absl::Now();
  uint64_t bytes = 0;
  for (const ReadySet* s : sets) bytes += s->requests.front().bytes;
  const std::string& job = options_.job_id;
  const std::string fuse_args = absl::StrCat("\"tensors\":", sets.size());
  const std::string reduce_args =
      absl::StrCat("\"bytes\":", bytes, ",\"backend\":", JsonString(backend));
  for (Timeline* timeline : timelines) {
    for (const ReadySet* s : sets) {
      for (const Request& r : s->requests) {
        // Queued until every rank here had it; negotiated (among the nodes,
        // or at once on one) until the plan ran it.
        timeline->Span(job, r.rank, s->name, "QUEUED", r.submitted_at, s->ready_at);
        timeline->Span(job, r.rank, s->name, "NEGOTIATED", s->ready_at, start);
        timeline->Instant(job, r.rank, s->name, "FUSED", start, fuse_args);
        timeline->Span(job, r.rank, s->name, "REDUCED", start, end, reduce_args);
        timeline->Instant(job, r.rank, s->name, "DONE", done);
      }
    }
  }
}

void Executor::Record(const std::vector<const ReadySet*>& sets, const absl::Status& status,
                      absl::Time start, absl::Time end) {
  if (sets.empty()) return;
  const Request& head = sets.front()->requests.front();
  const absl::Time done = absl::Now();
  const int fused = static_cast<int>(sets.size());
  uint64_t bytes = 0;
  for (const ReadySet* s : sets) bytes += s->requests.front().bytes;
  if (Metrics* metrics = options_.metrics) {
    metrics->RecordResponse(head.kind, head.dtype, fused, bytes);
    for (const ReadySet* s : sets) {
      metrics->RecordLatency(head.kind, done - s->first_submitted);
      if (!status.ok()) metrics->RecordError(head.kind);
    }
  }
  events_->Finished(sets, status, start, end);
}

}  // namespace kolo::daemon
