#include "daemon/job.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
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
         uint64_t fusion_threshold_bytes)
    : id_(std::move(id)),
      token_(std::move(token)),
      size_(size),
      backend_(backend),
      fusion_threshold_(fusion_threshold_bytes),
      table_(size) {
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
    if (!abort_status_.ok()) {
      refused = abort_status_;
    } else {
      auto added = table_.Add(request);
      if (!added.ok()) {
        refused = added.status();
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
      if (set.agreement.ok()) {
        agreed.push_back(std::move(set));
        continue;
      }
      for (Request& r : set.requests) {
        out.push_back({r.session.get(), Completion{r.request_id, set.agreement}});
      }
    }
    Deliver(out);
    std::vector<Response> responses =
        PlanFusion(std::move(agreed), fusion_threshold_);
    for (const Response& response : responses) {
      absl::Status status = backend_->Execute(response, size_);
      uint64_t bytes = 0;
      for (const FusedMember& m : response.members) {
        bytes += m.set.requests.front().bytes;
        for (const Request& r : m.set.requests) {
          out.push_back({r.session.get(), Completion{r.request_id, status}});
        }
      }
      Deliver(out);
      absl::MutexLock l(&mu_);
      ++responses_;
      fused_tensors_ += response.members.size();
      bytes_reduced_ += bytes;
      for (const FusedMember& m : response.members) {
        for (const Request& r : m.set.requests) ranks_[r.rank].completed++;
      }
    }
  }
}

JobSnapshot Job::Snapshot() const {
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
  return s;
}

}  // namespace kolo::daemon
