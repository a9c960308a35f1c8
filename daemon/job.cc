#include "daemon/job.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/rank_ranges.h"
#include "daemon/fusion_planner.h"
#include "daemon/session.h"

namespace kolo::daemon {
namespace {

// Delivers completions grouped per session: one doorbell per session.
void Deliver(std::vector<std::pair<Session*, Completion>>& items) {
  std::map<Session*, std::vector<Completion>> by_session;
  for (auto& [s, c] : items) by_session[s].push_back(std::move(c));
  for (auto& [s, cs] : by_session) s->Complete(cs);
  items.clear();
}

}  // namespace

Job::Job(std::string id, std::string token, int size, Backend* backend,
         uint64_t fusion_threshold_bytes, JobObservers observers)
    : id_(std::move(id)),
      token_(std::move(token)),
      size_(size),
      backend_(backend),
      fusion_threshold_(fusion_threshold_bytes),
      observers_(observers),
      created_(absl::Now()),
      table_(size),
      recorder_(observers.flight_records, observers.flight_errors) {
  ranks_.resize(size);
  for (int r = 0; r < size; ++r) ranks_[r].rank = r;
}

absl::Status Job::AttachRank(int rank, const std::string& session_id,
                             int64_t pid) {
  absl::MutexLock l(&mu_);
  if (!abort_status_.ok()) {
    return absl::AbortedError(absl::StrCat(
        "job ", id_, " was aborted (", abort_status_.message(),
        "); start it again once its ranks have left"));
  }
  RankSnapshot& r = ranks_[rank];
  if (r.attached) {
    return absl::AlreadyExistsError(absl::StrCat(
        "rank ", rank, " of job ", id_, " is already attached (pid ", r.pid,
        ")"));
  }
  r.attached = true;
  r.session_id = session_id;
  r.pid = pid;
  ++attached_;
  return absl::OkStatus();
}

int Job::RankLeft(int rank, bool clean, const absl::Status& why) {
  int remaining;
  {
    absl::MutexLock l(&mu_);
    RankSnapshot& r = ranks_[rank];
    if (r.attached) {
      r.attached = false;
      --attached_;
    }
    remaining = attached_;
  }
  if (remaining > 0) {
    absl::Status status =
        clean ? absl::AbortedError(absl::StrCat(
                    "job ", id_, ": rank ", rank,
                    " has shut down; collectives that need it cannot run"))
              : absl::AbortedError(absl::StrCat("job ", id_, ": rank ", rank,
                                                " died: ", why.message()));
    Abort(status);
  }
  return remaining;
}

void Job::Fail(std::vector<Request> requests, const absl::Status& status) {
  std::vector<std::pair<Session*, Completion>> out;
  for (Request& r : requests) {
    out.push_back({r.session.get(), Completion{r.request_id, status}});
  }
  Deliver(out);
}

void Job::Abort(const absl::Status& status) {
  std::vector<Request> pending;
  {
    absl::MutexLock l(&mu_);
    if (!abort_status_.ok()) return;
    abort_status_ = status;
    recorder_.Error(status.ToString());
    pending = table_.TakeAll();
    for (ReadySet& set : ready_) {
      for (Request& r : set.requests) pending.push_back(std::move(r));
    }
    ready_.clear();
  }
  Fail(std::move(pending), status);
}

void Job::Submit(Request request) {
  absl::Status refused;
  {
    absl::MutexLock l(&mu_);
    ranks_[request.rank].submitted++;
    ranks_[request.rank].last_submit = request.submitted_at;
    if (!abort_status_.ok()) {
      refused = abort_status_;
    } else {
      auto added = table_.Add(request);
      if (!added.ok()) {
        refused = added.status();
        recorder_.Error(refused.ToString());
      } else if (added->has_value()) {
        ready_.push_back(std::move(**added));
        if (executing_) return;  // the running executor will take it
        executing_ = true;
      } else {
        return;  // other ranks still missing
      }
    }
  }
  if (!refused.ok()) {
    Fail({std::move(request)}, refused);
    return;
  }
  RunReady();
}

void Job::RunReady() {
  Timeline* timeline = observers_.timeline;
  Metrics* metrics = observers_.metrics;
  for (;;) {
    std::vector<ReadySet> batch;
    {
      absl::MutexLock l(&mu_);
      if (ready_.empty()) {
        executing_ = false;
        return;
      }
      batch.swap(ready_);
    }
    std::vector<std::pair<Session*, Completion>> out;
    std::vector<ReadySet> agreed;
    for (ReadySet& set : batch) {
      if (timeline != nullptr && timeline->recording()) {
        for (const Request& r : set.requests) {
          timeline->Span(id_, r.rank, set.name, "QUEUED", r.submitted_at, set.ready_at);
          timeline->Instant(id_, r.rank, set.name, "NEGOTIATED", set.ready_at);
        }
      }
      if (set.agreement.ok()) {
        agreed.push_back(std::move(set));
        continue;
      }
      for (Request& r : set.requests) {
        out.push_back({r.session.get(), Completion{r.request_id, set.agreement}});
      }
      if (metrics != nullptr) metrics->RecordError(set.requests.front().kind);
      absl::MutexLock l(&mu_);
      recorder_.Error(set.agreement.ToString());
      const Request& r = set.requests.front();
      recorder_.Record(CollectiveRecord{0, r.kind, set.name, r.dtype, r.op, r.bytes,
                                        true, std::string(set.agreement.message()),
                                        set.first_submitted, set.ready_at,
                                        absl::ZeroDuration(), 0});
    }
    Deliver(out);
    std::vector<Response> responses =
        PlanFusion(std::move(agreed), fusion_threshold_);
    for (const Response& response : responses) {
      const absl::Time start = absl::Now();
      {
        absl::MutexLock l(&mu_);
        executing_name_ = response.members.front().set.name;
        executing_kind_ = response.kind;
        executing_since_ = start;
      }
      absl::Status status = backend_->Execute(response, size_);
      const absl::Time end = absl::Now();
      uint64_t bytes = 0;
      for (const FusedMember& m : response.members) {
        bytes += m.set.requests.front().bytes;
        for (const Request& r : m.set.requests) {
          out.push_back({r.session.get(), Completion{r.request_id, status}});
        }
      }
      Deliver(out);
      const absl::Time done = absl::Now();
      const int fused = static_cast<int>(response.members.size());
      if (metrics != nullptr) {
        metrics->RecordResponse(response.kind, response.dtype, fused, bytes);
        for (const FusedMember& m : response.members) {
          metrics->RecordLatency(response.kind, done - m.set.first_submitted);
          if (!status.ok()) metrics->RecordError(response.kind);
        }
      }
      if (timeline != nullptr && timeline->recording()) {
        std::string fuse_args = absl::StrCat("\"tensors\":", fused);
        std::string reduce_args = absl::StrCat(
            "\"bytes\":", bytes, ",\"backend\":", JsonString(std::string(backend_->name())));
        for (const FusedMember& m : response.members) {
          for (const Request& r : m.set.requests) {
            timeline->Instant(id_, r.rank, m.set.name, "FUSED", start, fuse_args);
            timeline->Span(id_, r.rank, m.set.name, "REDUCED", start, end, reduce_args);
            timeline->Instant(id_, r.rank, m.set.name, "DONE", done);
          }
        }
      }
      absl::MutexLock l(&mu_);
      executing_since_ = absl::InfiniteFuture();
      ++responses_;
      fused_tensors_ += response.members.size();
      bytes_reduced_ += bytes;
      for (const FusedMember& m : response.members) {
        for (const Request& r : m.set.requests) {
          ranks_[r.rank].completed++;
          ranks_[r.rank].last_complete = done;
        }
        const Request& r = m.set.requests.front();
        recorder_.Record(CollectiveRecord{
            0, r.kind, m.set.name, r.dtype, r.op, r.bytes, !status.ok(),
            std::string(status.message()), m.set.first_submitted,
            m.set.ready_at, end - start, fused - 1});
      }
      if (!status.ok()) recorder_.Error(status.ToString());
    }
  }
}

std::vector<StallView> Job::Stalls(absl::Time now, absl::Duration warning) const {
  absl::MutexLock l(&mu_);
  std::vector<StallView> out;
  for (PendingView& p : table_.Pending()) {
    absl::Duration waiting = now - p.first_submitted;
    if (waiting < warning) continue;
    StallView s;
    s.name = p.name;
    s.kind = p.kind;
    s.waiting = waiting;
    s.since = p.first_submitted;
    s.message = absl::StrFormat(
        "%s \"%s\" waiting %d s for ranks %s (submitted: %s)",
        CollectiveKindName(p.kind), p.name, absl::ToInt64Seconds(waiting),
        FormatRankRanges(p.missing), FormatRankRanges(p.submitted));
    s.submitted = std::move(p.submitted);
    s.missing = std::move(p.missing);
    out.push_back(std::move(s));
  }
  if (executing_since_ != absl::InfiniteFuture() &&
      now - executing_since_ >= warning) {
    StallView s;
    s.name = executing_name_;
    s.kind = executing_kind_;
    s.executing = true;
    s.waiting = now - executing_since_;
    s.since = executing_since_;
    for (int r = 0; r < size_; ++r) s.submitted.push_back(r);
    s.message = absl::StrFormat(
        "%s \"%s\" executing for %d s (every rank submitted; stuck in the %s backend)",
        CollectiveKindName(s.kind), s.name, absl::ToInt64Seconds(s.waiting),
        backend_->name());
    out.push_back(std::move(s));
  }
  return out;
}

JobSnapshot Job::Snapshot(bool with_history) const {
  absl::MutexLock l(&mu_);
  JobSnapshot s;
  s.job_id = id_;
  s.size = size_;
  s.aborted = !abort_status_.ok();
  s.error = std::string(abort_status_.message());
  s.ranks = ranks_;
  s.pending = table_.Pending();
  s.responses = responses_;
  s.fused_tensors = fused_tensors_;
  s.bytes_reduced = bytes_reduced_;
  s.created = created_;
  if (with_history) {
    s.recent.assign(recorder_.records().begin(), recorder_.records().end());
    s.errors.assign(recorder_.errors().begin(), recorder_.errors().end());
  }
  return s;
}

}  // namespace kolo::daemon
