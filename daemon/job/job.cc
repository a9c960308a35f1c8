#include "daemon/job/job.h"

#include <malloc.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/membership.h"
#include "common/rank_ranges.h"
#include "common/scatter_rows.h"
#include "common/status_macros.h"
#include "daemon/coordinator/abort_status.h"
#include "daemon/exec/completions.h"
#include "daemon/plan/runnable.h"
#include "proto/kolo/abi/collective_traits.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
Job::Job(std::string id, std::string token, int size, Backend* backend,
         uint64_t fusion_threshold_bytes, const NegotiatorFactory& negotiators,
         JobObservers observers, JobLayout layout, DeviceBackendFactory* device_backends)
    : id_(std::move(id)),
      token_(std::move(token)),
      size_(size),
      observers_(observers),
      created_(absl::Now()),
      layout_(std::move(layout)),
      local_size_(layout_.local_size > 0 ? layout_.local_size : size_),
      executor_(ExecutorOptions{id_, layout_.env.node_name, observers.metrics, observers.timeline,
                                &timeline_, device_backends},
                this),
      negotiator_(negotiators(NegotiatorParams{id_, token_, size_, backend, fusion_threshold_bytes,
                                               layout_, device_backends},
                              &executor_)),
      table_(size),
      recorder_(observers.flight_records, observers.flight_errors),
      sets_(size) {
  // Per-rank state is kept for the ranks hosted here: every rank of a
  // one-node job (so status can name those not attached yet), else the
  // local ranks as they attach.
  if (local_size_ == size_) {
    for (int r = 0; r < size; ++r) ranks_[r].rank = r;
  }
  joins_.Reset(size);
  live_negotiator_.store(negotiator_.get());
}

Job::~Job() {
  // A node whose ranks all finished and left says so before its link to the
  // coordinator closes: what is already planned then completes on the other
  // nodes (their last transfers with this one are done or in flight) instead
  // of failing on a lost stream, and what needs these ranks fails naming them.
  if (negotiator_->has_peers()) {
    bool finished;
    std::vector<int> local;
    {
      absl::MutexLock l(&mu_);
      finished = started_ && abort_status_.ok() && !unclean_leave_;
      local = local_ranks_;
    }
    if (finished) {
      negotiator_->Abort(PlannedMayFinish(absl::AbortedError(absl::StrCat(
          "job ", id_, ": ranks ", FormatRankRanges(local), " (node ", layout_.env.node_name,
          ") finished and left; collectives that need them cannot run"))));
    }
  }
  // The negotiator's threads run the executor, which calls the job.
  live_negotiator_.store(nullptr);
  negotiator_.reset();
  // A job's buffers (fusion and staging buffers, UCX's pools) were spread
  // over the allocator arenas of its threads; freed, they would stay in
  // kolod's resident memory until reused. Hand the free pages back.
  malloc_trim(0);
}

void Job::MaybeStart() {
  std::vector<int> local;
  {
    absl::MutexLock l(&mu_);
    if (started_ || starting_ || static_cast<int>(local_ranks_.size()) < local_size_ ||
        !abort_status_.ok()) {
      return;
    }
    starting_ = true;
    local = local_ranks_;
  }
  if (absl::Status s = negotiator_->Start(std::move(local)); !s.ok()) {
    spdlog::warn("job {}: cannot join the other nodes: {}", id_, s.ToString());
    Abort(absl::Status(
        s.code() == absl::StatusCode::kFailedPrecondition ? s.code()
                                                          : absl::StatusCode::kUnavailable,
        absl::StrCat("job ", id_, ": this node cannot join the others: ", s.message())));
    return;
  }
  {
    absl::MutexLock l(&mu_);
    started_ = true;
    TakeReadyLocked();
    MaybeJoinedLocked();  // every local rank may have joined already
  }
  negotiator_->Progress();
}

absl::StatusOr<std::vector<int>> Job::ProcessSetMembers(int process_set) const {
  absl::MutexLock l(&mu_);
  const std::vector<int>* members = sets_.Members(process_set);
  if (members == nullptr) {
    return absl::NotFoundError(absl::StrCat("job ", id_, " has no process set ", process_set));
  }
  return *members;
}

absl::Status Job::AttachRank(int rank, const std::string& session_id, int64_t pid) {
  absl::MutexLock l(&mu_);
  if (!abort_status_.ok()) {
    return absl::AbortedError(absl::StrCat("job ", id_, " was aborted (", abort_status_.message(),
                                           "); start it again once its ranks have left"));
  }
  RankSnapshot& r = ranks_[rank];
  r.rank = rank;
  if (r.attached) {
    return absl::AlreadyExistsError(
        absl::StrCat("rank ", rank, " of job ", id_, " is already attached (pid ", r.pid, ")"));
  }
  if (static_cast<int>(local_ranks_.size()) >= local_size_ && !started_) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id_, ": already ", local_size_, " local ranks attached on this node"));
  }
  r.attached = true;
  r.session_id = session_id;
  r.pid = pid;
  ++attached_;
  if (!std::binary_search(local_ranks_.begin(), local_ranks_.end(), rank)) {
    local_ranks_.insert(std::lower_bound(local_ranks_.begin(), local_ranks_.end(), rank), rank);
  }
  return absl::OkStatus();
}

int Job::RankLeft(int rank, bool clean, const absl::Status& why) {
  int remaining;
  std::string session_id;
  {
    absl::MutexLock l(&mu_);
    RankSnapshot& r = ranks_[rank];
    session_id = r.session_id;
    if (!clean) unclean_leave_ = true;
    if (r.attached) {
      r.attached = false;
      --attached_;
    }
    remaining = attached_;
  }
  if (remaining > 0 && layout_.elastic_epoch > 0) {
    // What was planned with the rank still runs (it may have its part); what
    // needs it fails, and the survivors reset into the next epoch.
    Abort(PlannedMayFinish(MembershipChangedError(absl::StrCat(
        "job ", id_, " epoch ", layout_.elastic_epoch, ": rank ", rank,
        clean ? " left" : absl::StrCat(" died: ", why.message()), "; reset into the next epoch"))));
  } else if (remaining > 0) {
    absl::Status status = clean ? PlannedMayFinish(absl::AbortedError(absl::StrCat(
                                      "job ", id_, ": rank ", rank,
                                      " has shut down; collectives that need it cannot run")))
                                : absl::AbortedError(absl::StrCat("job ", id_, ": rank ", rank,
                                                                  " died: ", why.message()));
    Abort(status);
  }
  // After its pending requests failed: the session's IPC mappings go (those
  // a running collective holds close when it finishes).
  executor_.ReleaseSession(session_id);
  return remaining;
}

void Job::JoinCompleted(std::vector<ReadySet> sets, int last_joined) {
  Outbox out;
  {
    absl::MutexLock l(&mu_);
    for (const ReadySet& set : sets) {
      for (const Request& r : set.requests) {
        out.push_back(
            {r.origin.get(), Completion{r.request_id, absl::OkStatus(), 0, 0, last_joined}});
      }
    }
    joins_.Reset();
  }
  Deliver(out);
}

void Job::ProcessSetChanged(std::vector<ReadySet> sets, int new_set) {
  Outbox out;
  {
    absl::MutexLock l(&mu_);
    for (ReadySet& set : sets) {
      const Request& first = set.requests.front();
      int id = new_set;
      if (first.kind == CollectiveKind::kAddProcessSet) {
        sets_.AddAs(id, std::vector<int>(first.aux.begin(), first.aux.end()));
      } else {
        id = first.aux.empty() ? 0 : static_cast<int>(first.aux[0]);
        (void)sets_.Remove(id);  // agreed and planned: it exists here too
        absl::Status gone =
            absl::FailedPreconditionError(absl::StrCat("process set ", id, " was removed"));
        for (Request& r : table_.TakeProcessSet(id)) {
          out.push_back({r.origin.get(), Completion{r.request_id, gone}});
        }
        // Members of its groups held for the rest: the rest will not come.
        for (auto it = groups_.begin(); it != groups_.end();) {
          if (it->first.first != id) {
            ++it;
            continue;
          }
          for (ReadySet& held : it->second) {
            for (Request& r : held.requests) {
              out.push_back({r.origin.get(), Completion{r.request_id, gone}});
            }
          }
          it = groups_.erase(it);
        }
      }
      for (const Request& r : set.requests) {
        out.push_back({r.origin.get(), Completion{r.request_id, absl::OkStatus(), 0, 0, id}});
      }
    }
  }
  Deliver(out);
}

absl::Status Job::AbortStatus() const {
  absl::MutexLock l(&mu_);
  return abort_status_;
}

void Job::AbortFromPeers(const absl::Status& why) {
  if (layout_.elastic_epoch == 0 || why.ok() || IsMembershipChanged(why)) return Abort(why);
  // What the other nodes end (a lost node, a rank there that left) is, to
  // an elastic epoch's ranks, a membership change: they reset into the next
  // epoch. An operator's abort or a stall here stays what it is.
  absl::Status changed =
      MembershipChangedError(absl::StrCat("job ", id_, " epoch ", layout_.elastic_epoch, ": ",
                                          why.message(), "; reset into the next epoch"));
  Abort(IsPlannedMayFinish(why) ? PlannedMayFinish(changed) : changed);
}

absl::Status Job::LinkLost(const absl::Status& why) {
  // Not elastic: the job ends when the Peer plane reports the node; until
  // then the collective fails with how the link broke.
  if (layout_.elastic_epoch == 0) return why;
  AbortFromPeers(why);
  return AbortStatus();
}

void Job::Abort(const absl::Status& status) {
  std::vector<Request> pending;
  {
    absl::MutexLock l(&mu_);
    if (!abort_status_.ok()) return;
    abort_status_ = status;
    recorder_.Error(status.ToString());
    pending = table_.TakeAll();
    for (auto& [key, sets] : groups_) {
      for (ReadySet& set : sets) {
        for (Request& r : set.requests) pending.push_back(std::move(r));
      }
    }
    groups_.clear();
    for (Request& r : join_requests_) pending.push_back(std::move(r));
    join_requests_.clear();
  }
  Outbox out;
  for (Request& r : pending) out.push_back({r.origin.get(), Completion{r.request_id, status}});
  Deliver(out);
  // The executor first: a transfer the negotiator's abort cuts short then
  // already fails with why the job ended.
  executor_.Abort(status);
  if (Negotiator* n = live_negotiator_.load()) n->Abort(status);
}

absl::Status Job::AdmitLocked(const Request& r) const {
  if (!abort_status_.ok()) return abort_status_;
  const char* kind = CollectiveKindName(r.kind);

  if (r.caller != nullptr && !negotiator_->takes_caller_memory()) {
    return absl::FailedPreconditionError(
        absl::StrCat(kind, " \"", r.name, "\": tensors by address are for one-node jobs; job ", id_,
                     " spans nodes"));
  }
  if (r.device.has_value() && r.process_set != 0) {
    // The job has one NCCL communicator, over every rank's GPU.
    return absl::UnimplementedError(
        absl::StrCat(kind, " \"", r.name,
                     "\": device tensors run on the whole job so far, not on process "
                     "set ",
                     r.process_set, " (copy the tensor to host memory for a process set)"));
  }
  if (r.device.has_value() && r.kind == CollectiveKind::kReducescatter && !r.shape.empty()) {
    // The rank's share of the rows is known here; a wrong output size found
    // by the device backend of a job across nodes would end the job.
    const uint64_t want =
        static_cast<uint64_t>(ScatterRows(r.shape.front(), size_, r.rank)) * RowBytes(r);
    if (r.device->output.bytes != want) {
      return absl::InvalidArgumentError(
          absl::StrCat(kind, " \"", r.name, "\": rank ", r.rank, "'s device output has ",
                       r.device->output.bytes, " bytes; its rows of the result have ", want));
    }
  }
  if (r.kind == CollectiveKind::kJoin && sets_.added() > 0 &&
      !negotiator_->joins_with_process_sets()) {
    return absl::UnimplementedError(
        absl::StrCat(kind, ": job ", id_,
                     " spans nodes, where join is not available while process sets "
                     "exist (remove them first)"));
  }
  KOLO_RETURN_IF_ERROR(plan::CheckWholeJob(r.kind, r.name, r.process_set));
  const std::vector<int>* members = sets_.Members(r.process_set);
  if (members == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(kind, " \"", r.name, "\": rank ", r.rank,
                                                      " used process set ", r.process_set,
                                                      ", which does not exist"));
  }
  if (sets_.Removing(r.process_set)) {
    return absl::FailedPreconditionError(absl::StrCat(kind, " \"", r.name, "\": rank ", r.rank,
                                                      " used process set ", r.process_set,
                                                      ", which is being removed"));
  }
  if (!std::binary_search(members->begin(), members->end(), r.rank)) {
    return absl::FailedPreconditionError(absl::StrCat(kind, " \"", r.name, "\": rank ", r.rank,
                                                      " is not in process set ", r.process_set,
                                                      " (ranks ", FormatRankRanges(*members), ")"));
  }
  if (joins_.joined(r.rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat(kind, " \"", r.name, "\": rank ", r.rank,
                     " has joined and submits nothing until every rank has joined"));
  }
  return absl::OkStatus();
}

std::vector<int> Job::RequiredLocked(int process_set) const {
  if (!started_) return {-1};  // nothing is ready before the negotiator runs
  return ExpectedLocked(process_set);
}

std::vector<int> Job::ExpectedLocked(int process_set) const {
  std::vector<int> out;
  const std::vector<int>* members = sets_.Members(process_set);
  if (members == nullptr) return out;
  // The ranks hosted here: every rank when all attach here (also those not
  // attached yet), else those attached so far.
  const std::vector<int>& hosted = local_size_ == size_ ? *sets_.Members(0) : local_ranks_;
  for (int r : hosted) {
    if (!joins_.joined(r) && std::binary_search(members->begin(), members->end(), r)) {
      out.push_back(r);
    }
  }
  return out;
}

void Job::TakeReadyLocked() {
  for (ReadySet& set : table_.TakeReady(
           [this](int ps) ABSL_NO_THREAD_SAFETY_ANALYSIS { return RequiredLocked(ps); })) {
    OnReadyLocked(std::move(set));
  }
}

absl::Status Job::CheckRunnableLocked(const ReadySet& set) const {
  const Request& first = set.requests.front();
  const char* kind = CollectiveKindName(first.kind);
  const std::vector<int>* found = sets_.Members(set.process_set);
  if (found == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(kind, " \"", set.name, "\": process set ", set.process_set, " was removed"));
  }
  const std::vector<int>& members = *found;
  if (set.joined > 0) {
    const plan::JoinedRanks joined{set.joined, joins_.JoinedIn(members)};
    KOLO_RETURN_IF_ERROR(plan::CheckRunsWithJoined(first.kind, set.name, joined));
  }
  const CollectiveTraits& traits = Traits(first.kind);
  // A broadcast whose root joined was refused above, as every broadcast
  // with joined ranks is.
  if (traits.rooted) {
    return plan::CheckRootInSet(set.name, first.root_rank, set.process_set, members);
  }
  if (traits.splits) {
    for (const Request& r : set.requests) {
      KOLO_RETURN_IF_ERROR(plan::CheckAlltoallSplits(set.name, r.rank, r.shape[0], r.aux,
                                                     static_cast<int64_t>(members.size())));
    }
    return absl::OkStatus();
  }
  if (traits.set_change) return plan::CheckSetChange(first.kind, set.name, first.aux, sets_);
  return absl::OkStatus();
}

void Job::OnReadyLocked(ReadySet set) {
  // Checked here on this node's ranks (alltoall splits, broadcast roots);
  // across nodes a failure reaches the others through the coordinator.
  const std::vector<int>* members = sets_.Members(set.process_set);
  set.set_size = members == nullptr ? size_ : static_cast<int>(members->size());
  // Joined ranks of the set known here (the coordinator adds the rest).
  set.joined = 0;
  if (members != nullptr) set.joined = joins_.CountIn(*members);
  if (set.agreement.ok()) set.agreement = CheckRunnableLocked(set);
  if (set.agreement.ok() && set.requests.front().kind == CollectiveKind::kRemoveProcessSet) {
    // From now on the set takes no new names, and no second removal.
    sets_.BeginRemoval(static_cast<int>(set.requests.front().aux[0]));
  }
  // A group goes to the negotiator once it is complete here, its members
  // together, so they are planned (and fused) together. A member that
  // failed (its ranks disagreed) still counts toward its group: it is
  // released with the others and fails alone, instead of holding them back
  // forever.
  const Request& first = set.requests.front();
  if (first.group_size <= 1) {
    negotiator_->LocallyReady(std::move(set));
    return;
  }
  auto key = std::make_pair(set.process_set, first.group_id);
  std::vector<ReadySet>& group = groups_[key];
  const size_t group_size = first.group_size;
  group.push_back(std::move(set));
  if (group.size() < group_size) return;
  for (ReadySet& member : group) negotiator_->LocallyReady(std::move(member));
  groups_.erase(key);
}

bool Job::InFlightLocked(const Request& request) const {
  if (negotiator_->Waiting(request.process_set, request.name)) return true;
  for (const auto& [key, members] : groups_) {
    for (const ReadySet& set : members) {
      if (set.name == request.name && set.process_set == request.process_set) return true;
    }
  }
  return false;
}

void Job::JoinLocked(Request request) {
  const int rank = request.rank;
  joins_.Join(rank, rank);
  join_requests_.push_back(std::move(request));
  // Names that waited only for this rank are ready now, and go first: the
  // join must not overtake them.
  TakeReadyLocked();
  MaybeJoinedLocked();
}

void Job::MaybeJoinedLocked() {
  // Counted against every rank this node hosts, once all attached and the
  // negotiator runs (MaybeStart calls this again then).
  if (!started_ || join_requests_.empty() ||
      join_requests_.size() < static_cast<size_t>(local_size_)) {
    return;
  }
  // Every rank of this node has joined: the negotiator learns it (across
  // nodes the coordinator stops waiting for this node, which takes part
  // with zeros until every node has joined). Its own key (set -1) keeps it
  // apart from any tensor name.
  ReadySet set;
  set.name = "kolo.join";
  set.process_set = -1;
  set.first_submitted = join_requests_.front().submitted_at;
  set.ready_at = absl::Now();
  set.set_size = size_;
  for (Request& r : join_requests_) {
    r.aux = {joins_.last_rank()};
    set.requests.push_back(std::move(r));
  }
  join_requests_.clear();
  negotiator_->LocallyReady(std::move(set));
}

void Job::Submit(Request request) {
  Accept(std::move(request));
  Progress();
}

void Job::Progress() { negotiator_->Progress(); }

void Job::Accept(Request request) {
  Outbox out;
  {
    absl::MutexLock l(&mu_);
    ranks_[request.rank].submitted++;
    ranks_[request.rank].last_submit = request.submitted_at;
    absl::Status refused = AdmitLocked(request);
    if (refused.ok() && request.kind == CollectiveKind::kJoin) {
      JoinLocked(std::move(request));
    } else if (refused.ok()) {
      // Once every local rank submitted a name it leaves the table; a rank
      // submitting it again before it was planned is a duplicate in flight.
      if (table_.pending_of(request.rank) >= layout_.limits.max_pending_per_rank) {
        refused = absl::ResourceExhaustedError(
            absl::StrCat(CollectiveKindName(request.kind), " \"", request.name, "\": rank ",
                         request.rank, " already has ", layout_.limits.max_pending_per_rank,
                         " names waiting for other ranks (kolod --max_pending_per_rank)"));
      } else if (InFlightLocked(request)) {
        refused = absl::AlreadyExistsError(
            absl::StrCat(CollectiveKindName(request.kind), " \"", request.name, "\": rank ",
                         request.rank, " submitted this name again while it is still in flight"));
      } else {
        auto added = table_.Add(request, RequiredLocked(request.process_set));
        if (!added.ok()) {
          refused = added.status();
        } else if (added->has_value()) {
          OnReadyLocked(std::move(**added));
        }
      }
    }
    if (!refused.ok()) {
      // A refusal because the job was aborted repeats the abort, which is
      // recorded once already (and may carry any code, e.g. DEADLINE_EXCEEDED
      // from the stall timeout); recording it per submission would flush the
      // errors that explain the abort out of the flight recorder.
      if (abort_status_.ok()) recorder_.Error(refused.ToString());
      out.push_back({request.origin.get(), Completion{request.request_id, refused}});
    }
  }
  Deliver(out);
}

void Job::Started(const std::string& name, CollectiveKind kind, const std::string& backend,
                  absl::Time since) {
  absl::MutexLock l(&mu_);
  executing_name_ = name;
  executing_kind_ = kind;
  executing_backend_ = backend;
  executing_since_ = since;
}

void Job::Finished(const std::vector<const ReadySet*>& sets, const absl::Status& status,
                   absl::Time start, absl::Time end) {
  const absl::Time done = absl::Now();
  const int fused = static_cast<int>(sets.size());
  absl::MutexLock l(&mu_);
  executing_since_ = absl::InfiniteFuture();
  ++responses_;
  fused_tensors_ += sets.size();
  for (const ReadySet* s : sets) {
    bytes_reduced_ += s->requests.front().bytes;
    for (const Request& r : s->requests) {
      ranks_[r.rank].completed++;
      ranks_[r.rank].last_complete = done;
    }
    const Request& r = s->requests.front();
    recorder_.Record(CollectiveRecord{0, r.kind, s->name, r.dtype, r.op, r.bytes, !status.ok(),
                                      std::string(status.message()), s->first_submitted,
                                      s->ready_at, end - start, fused - 1});
  }
  if (!status.ok()) recorder_.Error(status.ToString());
}

void Job::Refused(const ReadySet& set, const absl::Status& why) {
  absl::MutexLock l(&mu_);
  recorder_.Error(why.ToString());
  const Request& r = set.requests.front();
  if (r.kind == CollectiveKind::kRemoveProcessSet && !r.aux.empty() && set.agreement.ok()) {
    // Agreed here, refused by the plan (the nodes did not agree): it stays.
    sets_.CancelRemoval(static_cast<int>(r.aux[0]));
  }
  const absl::Time done = absl::Now();
  for (const Request& q : set.requests) {
    ranks_[q.rank].completed++;
    ranks_[q.rank].last_complete = done;
  }
  recorder_.Record(CollectiveRecord{0, r.kind, set.name, r.dtype, r.op, r.bytes, true,
                                    std::string(why.message()), set.first_submitted, set.ready_at,
                                    absl::ZeroDuration(), 0});
}

std::vector<StallView> Job::Stalls(absl::Time now, absl::Duration warning) const {
  absl::MutexLock l(&mu_);
  std::vector<StallView> out;
  // A stall of `name` first submitted at `since`; nullopt if not yet one.
  auto stall = [&](const std::string& name, CollectiveKind kind,
                   absl::Time since) -> std::optional<StallView> {
    if (now - since < warning) return std::nullopt;
    StallView s;
    s.name = name;
    s.kind = kind;
    s.waiting = now - since;
    s.since = since;
    return s;
  };
  for (PendingView& p : table_.Pending(
           [this](int ps) ABSL_NO_THREAD_SAFETY_ANALYSIS { return ExpectedLocked(ps); })) {
    std::optional<StallView> found = stall(p.name, p.kind, p.first_submitted);
    if (!found) continue;
    StallView& s = *found;
    const absl::Duration waiting = s.waiting;
    s.message = absl::StrFormat("%s \"%s\" waiting %d s for ranks %s (submitted: %s)",
                                CollectiveKindName(p.kind), p.name, absl::ToInt64Seconds(waiting),
                                FormatRankRanges(p.missing), FormatRankRanges(p.submitted));
    s.submitted = std::move(p.submitted);
    s.missing = std::move(p.missing);
    out.push_back(std::move(s));
  }
  {
    // Ready here, waiting for the other nodes' ranks.
    for (const WaitingName& p : negotiator_->WaitingNames()) {
      std::optional<StallView> found = stall(p.name, p.kind, p.first_submitted);
      if (!found) continue;
      StallView& s = *found;
      const absl::Duration waiting = s.waiting;
      s.remote = true;
      s.submitted = local_ranks_;
      if (!p.missing_ranks.empty()) {
        s.missing = p.missing_ranks;  // the nodes that have not said they have it
      } else {
        for (int r = 0; r < size_; ++r) {
          if (!std::binary_search(local_ranks_.begin(), local_ranks_.end(), r)) {
            s.missing.push_back(r);
          }
        }
      }
      s.message = absl::StrFormat(
          "%s \"%s\" waiting %d s for the other nodes (ranks %s have not all submitted; "
          "every rank here did: %s)",
          CollectiveKindName(p.kind), p.name, absl::ToInt64Seconds(waiting),
          FormatRankRanges(s.missing), FormatRankRanges(s.submitted));
      out.push_back(std::move(s));
    }
  }
  if (executing_since_ != absl::InfiniteFuture() && now - executing_since_ >= warning) {
    StallView s;
    s.name = executing_name_;
    s.kind = executing_kind_;
    s.executing = true;
    s.waiting = now - executing_since_;
    s.since = executing_since_;
    for (int r = 0; r < size_; ++r) s.submitted.push_back(r);
    s.message = absl::StrFormat(
        "%s \"%s\" executing for %d s (every rank submitted; stuck in the %s backend)",
        CollectiveKindName(s.kind), s.name, absl::ToInt64Seconds(s.waiting), executing_backend_);
    out.push_back(std::move(s));
  }
  return out;
}

JobSnapshot Job::Snapshot(bool with_history) const {
  absl::MutexLock l(&mu_);
  JobSnapshot s;
  s.job_id = id_;
  s.size = size_;
  s.epoch = layout_.elastic_epoch;
  s.aborted = !abort_status_.ok();
  s.error = std::string(abort_status_.message());
  s.ranks.reserve(ranks_.size());
  for (const auto& [rank, state] : ranks_) s.ranks.push_back(state);
  s.pending =
      table_.Pending([this](int ps) ABSL_NO_THREAD_SAFETY_ANALYSIS { return ExpectedLocked(ps); });
  s.responses = responses_;
  s.fused_tensors = fused_tensors_;
  s.bytes_reduced = bytes_reduced_;
  if (const Negotiator* n = live_negotiator_.load(); n != nullptr) {
    s.data_plane_negotiation = n->data_plane_messages();
  }
  s.created = created_;
  if (with_history) {
    s.recent.assign(recorder_.records().begin(), recorder_.records().end());
    s.errors.assign(recorder_.errors().begin(), recorder_.errors().end());
  }
  return s;
}

}  // namespace kolo::daemon
