#include "daemon/job/elastic_group.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/membership.h"
#include "common/rank_ranges.h"
#include "daemon/coordinator/abort_status.h"
#include "daemon/elastic/elastic_leader.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

constexpr size_t kMaxHistory = 64;
// How often a waiting attach looks at the clock (rejoin graces, its
// deadline) and whether its caller is still there.
constexpr absl::Duration kWaitTick = absl::Milliseconds(50);

}  // namespace

ElasticGroup::ElasticGroup(std::string job_id, std::string token, MakeJob make_job,
                           absl::Duration rejoin_grace, std::optional<Spanning> spanning)
    : job_id_(std::move(job_id)),
      token_(std::move(token)),
      make_job_(std::move(make_job)),
      rejoin_grace_(rejoin_grace),
      spanning_(std::move(spanning)) {
  if (spanning_.has_value()) leader_address_ = spanning_->leader;
}

absl::StatusOr<ElasticSeat> ElasticGroup::Join(const ElasticJoin& join, absl::Time deadline,
                                               const std::function<bool()>& cancelled) {
  Waiter w;
  w.join = join;
  absl::MutexLock l(&mu_);
  if (initial_size_ == 0) {
    initial_size_ = std::max(1, join.size);
    min_size_ = std::clamp(join.min_size, 1, initial_size_);
    max_size_ = join.max_size > 0 ? std::max(join.max_size, initial_size_) : 0;
  }
  if (finished_) return FinishedError();
  w.arrival = ++arrivals_;
  waiting_.push_back(&w);
  auto forget = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), &w), waiting_.end());
  };
  while (true) {
    absl::Time now = absl::Now();
    if (spanning_.has_value()) {
      MaybeReportLocked(now);
      now = absl::Now();
    } else {
      MaybeFormLocked(now);
    }
    if (w.seated) {
      if (!w.status.ok()) return w.status;
      return w.seat;
    }
    if (w.reported) {
      // Part of a call to the leader in flight: its answer may seat it.
      mu_.AwaitWithTimeout(absl::Condition(&w.seated), kWaitTick);
      continue;
    }
    if (now >= deadline) {
      forget();
      return absl::DeadlineExceededError(absl::StrCat(
          "elastic job ", job_id_, ": no epoch formed with this rank in time: ",
          waiting_.size() + 1, " rank(s) waited, the job needs at least ",
          epoch_ == 0 ? initial_size_ : min_size_, epoch_ == 0 ? " to start" : " (min size)"));
    }
    if (cancelled && cancelled()) {
      forget();
      return absl::CancelledError("the attaching rank went away while its epoch formed");
    }
    mu_.AwaitWithTimeout(absl::Condition(&w.seated), std::min(kWaitTick, deadline - now));
  }
}

std::shared_ptr<Job> ElasticGroup::Left(uint64_t epoch, int rank, bool clean, bool rejoin,
                                        const absl::Status& why) {
  absl::MutexLock l(&mu_);
  if (epoch != epoch_) return nullptr;  // a rank of an epoch that was already replaced
  auto it = members_.find(rank);
  if (it == members_.end()) return nullptr;
  const absl::Time now = absl::Now();
  it->second.attached = false;
  if (clean && rejoin) {
    it->second.rejoin_deadline = now + rejoin_grace_;
  } else {
    it->second.gone = true;
  }
  if (!ended_) {
    EndEpochLocked(!clean   ? absl::StrCat("rank ", rank, " died: ", why.message())
                   : rejoin ? absl::StrCat("rank ", rank, " reset")
                            : absl::StrCat("rank ", rank, " left"));
  }
  // Across nodes the waiting attaches report to the leader (they wake
  // within a tick); on one node the next epoch may form now.
  if (!spanning_.has_value()) MaybeFormLocked(now);
  bool all_gone = waiting_.empty();
  for (const auto& [r, m] : members_) all_gone = all_gone && m.gone;
  // Its last ranks finished or died: a joiner that comes now is refused
  // (across nodes the job may go on elsewhere; the leader decides).
  if (all_gone && !spanning_.has_value()) finished_ = true;
  // The ended epoch's Job (its transport, threads and sockets across nodes)
  // is needed no more once none of its ranks is attached here: the next
  // epoch is a new Job. Kept, it would hold them until the group goes.
  bool attached = false;
  for (const auto& [r, m] : members_) attached = attached || m.attached;
  if (ended_ && !attached && epoch_ == epoch) return std::move(current_);
  return nullptr;
}

void ElasticGroup::EndEpochLocked(const std::string& reason) {
  ended_ = true;
  end_reason_ = reason;
  if (current_ != nullptr) {
    current_->Abort(PlannedMayFinish(MembershipChangedError(absl::StrCat(
        "job ", job_id_, " epoch ", epoch_, ": ", reason, "; reset into the next epoch"))));
  }
  spdlog::info("job {}: epoch {} ends: {}", job_id_, epoch_, reason);
}

bool ElasticGroup::MemberSettledLocked(int rank, const Member& member, absl::Time now) const {
  if (member.gone) return true;
  if (!member.attached && now >= member.rejoin_deadline) return true;
  for (const Waiter* w : waiting_) {
    if (w->join.previous_epoch == epoch_ && w->join.previous_rank == rank) return true;
  }
  return false;
}

void ElasticGroup::MaybeFormLocked(absl::Time now) {
  if (waiting_.empty()) return;
  if (epoch_ == 0) {
    if (static_cast<int>(waiting_.size()) >= initial_size_) FormLocked(now);
    return;
  }
  if (!ended_) {
    EndOnResetLocked();
    if (!ended_) return;  // joiners wait for the next reset
  }
  for (const auto& [rank, member] : members_) {
    if (!MemberSettledLocked(rank, member, now)) return;
  }
  bool survivor = false;
  for (const Waiter* w : waiting_) {
    survivor =
        survivor || (w->join.previous_epoch == epoch_ && members_.count(w->join.previous_rank) > 0);
  }
  if (!survivor) {
    // Every rank of the ended epoch finished or died: the job's state went
    // with them, and joiners alone cannot carry it on.
    finished_ = true;
    FailWaitersLocked(FinishedError());
    return;
  }
  if (static_cast<int>(waiting_.size()) < min_size_) return;
  FormLocked(now);
}

absl::Status ElasticGroup::FinishedError() const {
  return absl::FailedPreconditionError(absl::StrCat(
      "elastic job ", job_id_, " has no rank left of epoch ", epoch_,
      " (they finished or died; its state went with them): a joiner cannot carry it on"));
}

void ElasticGroup::EndOnResetLocked() {
  // A rank of the current epoch asks for the next one: it reset (its state
  // saw ranks waiting to join, or its collectives failed); the others must
  // follow.
  for (const Waiter* w : waiting_) {
    if (w->join.previous_epoch == epoch_ && members_.count(w->join.previous_rank) > 0) {
      int joiners = 0;
      for (const Waiter* o : waiting_) joiners += o->join.previous_epoch != epoch_ ? 1 : 0;
      EndEpochLocked(absl::StrCat("rank ", w->join.previous_rank, " reset (", joiners,
                                  " rank(s) waiting to join)"));
      return;
    }
  }
}

void ElasticGroup::MaybeReportLocked(absl::Time now) {
  if (reporting_ || waiting_.empty()) return;
  if (epoch_ == 0) {
    bool joiners_only = true;
    for (const Waiter* w : waiting_) joiners_only = joiners_only && w->join.joiner;
    if (!joiners_only && static_cast<int>(waiting_.size()) < spanning_->local_size) return;
  } else if (!ended_) {
    EndOnResetLocked();
  }
  if (ended_) {
    for (const auto& [rank, member] : members_) {
      if (!MemberSettledLocked(rank, member, now)) return;
    }
  }
  kolo::v1::ElasticReport report;
  report.set_job_id(job_id_);
  report.set_job_token(token_);
  report.set_node(spanning_->node);
  report.set_address(spanning_->address);
  report.set_ended_epoch(epoch_);
  for (const kolo::v1::ElasticNode& n : nodes_) *report.add_ended_nodes() = n;
  report.set_ended_leader(leader_name_);
  report.set_initial_size(initial_size_);
  report.set_min_size(min_size_);
  report.set_max_size(max_size_);
  report.set_epoch_ended(ended_);
  report.set_reason(end_reason_);
  std::vector<Waiter*> reported = waiting_;
  for (Waiter* w : reported) {
    auto* c = report.add_candidates();
    c->set_id(w->join.session_id);
    c->set_previous_rank(w->join.previous_rank);
    c->set_previous_epoch(w->join.previous_epoch);
    c->set_hint_rank(std::max(0, w->join.hint_rank));
    c->set_joiner(w->join.joiner);
    c->set_arrival(w->arrival);
    w->reported = true;
  }
  reporting_ = true;
  const std::string address = leader_address_;
  mu_.Unlock();
  absl::StatusOr<kolo::v1::ElasticFormed> formed = spanning_->rendezvous->Call(address, report);
  mu_.Lock();
  reporting_ = false;
  for (Waiter* w : reported) w->reported = false;
  if (!formed.ok()) {
    const absl::StatusCode code = formed.status().code();
    // A slow answer is not a lost leader: ask it again.
    if (code == absl::StatusCode::kDeadlineExceeded) return;
    // The daemon asked knows no such job yet (its ranks have not attached):
    // ask again; the waiters' own deadline bounds it.
    if (code == absl::StatusCode::kNotFound) return;
    const bool unreachable = code == absl::StatusCode::kUnavailable;
    if (unreachable && epoch_ == 0) return;  // the leader's daemon may not be up yet
    if (unreachable) {
      // The leader is lost: its successor is the ended epoch's next node in
      // rank order that has not failed (the leader keeps the quorum rule).
      unreachable_.push_back(address);
      for (const kolo::v1::ElasticNode& n : nodes_) {
        if (std::find(unreachable_.begin(), unreachable_.end(), n.address()) ==
            unreachable_.end()) {
          spdlog::warn(
              "elastic job {}: the membership leader at {} is unreachable ({}); "
              "reporting to {} ({}) instead",
              job_id_, address, formed.status().ToString(), n.address(), n.node());
          leader_address_ = n.address();
          return;
        }
      }
    }
    FailWaitersLocked(absl::Status(
        code,
        absl::StrCat("elastic job ", job_id_, ": no epoch formed: ", formed.status().message())));
    return;
  }
  if (absl::Status bad = ValidateElasticFormed(*formed, spanning_->node); !bad.ok()) {
    spdlog::error("elastic job {}: the leader at {} answered with an unusable epoch: {}", job_id_,
                  address, bad.ToString());
    FailWaitersLocked(absl::InternalError(
        absl::StrCat("elastic job ", job_id_, ": the membership leader at ", address,
                     " answered with an unusable epoch: ", bad.message())));
    return;
  }
  if (formed->epoch() == 0) return;  // not yet
  if (formed->epoch() <= epoch_) {
    FailWaitersLocked(absl::InternalError(
        absl::StrCat("elastic job ", job_id_, ": the membership leader at ", address,
                     " formed epoch ", formed->epoch(), ", not after this node's ", epoch_)));
    return;
  }
  ApplyFormedLocked(*formed, absl::Now());
}

void ElasticGroup::FailWaitersLocked(const absl::Status& why) {
  for (Waiter* w : waiting_) {
    w->status = why;
    w->seated = true;
  }
  waiting_.clear();
}

void ElasticGroup::ApplyFormedLocked(const kolo::v1::ElasticFormed& formed, absl::Time now) {
  std::map<std::string, int> rank_of;
  for (const kolo::v1::ElasticPlacement& p : formed.placements()) rank_of[p.id()] = p.rank();
  std::vector<std::pair<int, Waiter*>> placed;
  for (Waiter* w : waiting_) {
    auto it = rank_of.find(w->join.session_id);
    if (it != rank_of.end()) placed.emplace_back(it->second, w);
  }
  std::sort(placed.begin(), placed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const int local_size = static_cast<int>(placed.size());
  std::shared_ptr<Job> job;
  if (local_size > 0) {
    // An epoch left on this node alone runs as a one-node job (no Peer
    // negotiation); its leader is still this node for the next change.
    const bool alone = formed.nodes_size() <= 1;
    job = make_job_(EpochLayout{formed.size(), formed.epoch(), local_size,
                                alone ? std::string() : formed.coordinator()});
  }
  nodes_.assign(formed.nodes().begin(), formed.nodes().end());
  leader_address_ = formed.coordinator();
  leader_name_ = formed.leader();
  unreachable_.clear();
  InstallEpochLocked(std::move(job), formed.epoch(), formed.size(), placed, formed.reason(), now);
  spdlog::info("job {}: epoch {} is led by {}", job_id_, formed.epoch(), formed.leader());
}

void ElasticGroup::FormLocked(absl::Time now) {
  // Survivors by their previous rank, then the first epoch's ranks by the
  // rank they asked for, then joiners as they came.
  auto key = [this](const Waiter* w) {
    const ElasticJoin& j = w->join;
    if (epoch_ > 0 && j.previous_epoch == epoch_ && members_.count(j.previous_rank) > 0) {
      return std::make_tuple(0, static_cast<int64_t>(j.previous_rank), w->arrival);
    }
    if (epoch_ == 0 && !j.joiner) {
      return std::make_tuple(1, static_cast<int64_t>(j.hint_rank), w->arrival);
    }
    return std::make_tuple(2, int64_t{0}, w->arrival);
  };
  std::vector<Waiter*> order = waiting_;
  std::stable_sort(order.begin(), order.end(),
                   [&](const Waiter* a, const Waiter* b) { return key(a) < key(b); });
  int size = static_cast<int>(order.size());
  if (max_size_ > 0) size = std::min(size, max_size_);
  const uint64_t epoch = epoch_ + 1;
  std::shared_ptr<Job> job = make_job_(EpochLayout{size, epoch, size, ""});

  std::vector<std::pair<int, Waiter*>> placed;
  for (int rank = 0; rank < size; ++rank) placed.emplace_back(rank, order[rank]);
  InstallEpochLocked(std::move(job), epoch, size, placed, epoch_ == 0 ? "started" : end_reason_,
                     now);
}

void ElasticGroup::InstallEpochLocked(std::shared_ptr<Job> job, uint64_t epoch, int size,
                                      const std::vector<std::pair<int, Waiter*>>& placed,
                                      const std::string& reason, absl::Time now) {
  EpochRecord record;
  record.epoch = epoch;
  record.at = now;
  record.size = size;
  record.reason = reason;
  const int local_size = static_cast<int>(placed.size());
  int survivors = 0;
  for (int i = 0; i < local_size; ++i) {
    const auto& [rank, w] = placed[i];
    const ElasticJoin& j = w->join;
    if (epoch_ > 0 && j.previous_epoch == epoch_ && members_.count(j.previous_rank) > 0) {
      ++survivors;
    } else if (epoch_ > 0) {
      record.joined.push_back(rank);
    }
    w->status = job->AttachRank(rank, j.session_id, j.pid);
    w->seat = ElasticSeat{job, rank, size, epoch, i, local_size};
    w->seated = true;
  }
  record.left = epoch_ == 0 ? 0 : static_cast<int>(members_.size()) - survivors;
  waiting_.erase(
      std::remove_if(waiting_.begin(), waiting_.end(), [](const Waiter* w) { return w->seated; }),
      waiting_.end());
  members_.clear();
  for (const auto& [rank, w] : placed) members_[rank] = Member{};
  spdlog::info("job {}: epoch {} formed with {} rank(s), {} here ({}; joined: {}, left: {})",
               job_id_, epoch, size, local_size, record.reason,
               record.joined.empty() ? std::string("none") : FormatRankRanges(record.joined),
               record.left);
  history_.push_back(std::move(record));
  if (history_.size() > kMaxHistory) history_.erase(history_.begin());
  epoch_ = epoch;
  current_ = std::move(job);
  ended_ = false;
  end_reason_.clear();
}

ElasticView ElasticGroup::View(int remote_joiners) const {
  absl::MutexLock l(&mu_);
  ElasticView v;
  v.epoch = epoch_;
  int joiners = remote_joiners;
  for (const Waiter* w : waiting_) joiners += w->join.previous_epoch != epoch_ ? 1 : 0;
  if (max_size_ > 0) {
    // Only those the next epoch has room for (the epoch's size, over every
    // node).
    const int size = history_.empty() ? 0 : history_.back().size;
    joiners = std::min(joiners, std::max(0, max_size_ - size));
  }
  v.joiners_waiting = epoch_ == 0 ? 0 : joiners;
  return v;
}

bool ElasticGroup::Finished() const {
  absl::MutexLock l(&mu_);
  return finished_;
}

bool ElasticGroup::Idle(absl::Time now) const {
  absl::MutexLock l(&mu_);
  if (!waiting_.empty()) return false;
  for (const auto& [rank, member] : members_) {
    if (member.attached || (!member.gone && now < member.rejoin_deadline)) return false;
  }
  return true;
}

std::vector<EpochRecord> ElasticGroup::History() const {
  absl::MutexLock l(&mu_);
  return history_;
}

}  // namespace kolo::daemon
