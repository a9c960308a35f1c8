#include "daemon/job/elastic_group.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/membership.h"
#include "common/rank_ranges.h"
#include "daemon/negotiation/abort_status.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

constexpr size_t kMaxHistory = 64;
// How often a waiting attach looks at the clock (rejoin graces, its
// deadline) and whether its caller is still there.
constexpr absl::Duration kWaitTick = absl::Milliseconds(50);

}  // namespace

ElasticGroup::ElasticGroup(std::string job_id, std::string token, MakeJob make_job,
                           absl::Duration rejoin_grace)
    : job_id_(std::move(job_id)),
      token_(std::move(token)),
      make_job_(std::move(make_job)),
      rejoin_grace_(rejoin_grace) {}

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
  w.arrival = ++arrivals_;
  waiting_.push_back(&w);
  auto forget = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), &w), waiting_.end());
  };
  while (true) {
    const absl::Time now = absl::Now();
    MaybeFormLocked(now);
    if (w.seated) {
      if (!w.status.ok()) return w.status;
      return w.seat;
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

void ElasticGroup::Left(uint64_t epoch, int rank, bool clean, bool rejoin,
                        const absl::Status& why) {
  absl::MutexLock l(&mu_);
  if (epoch != epoch_) return;  // a rank of an epoch that was already replaced
  auto it = members_.find(rank);
  if (it == members_.end()) return;
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
  MaybeFormLocked(now);
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
    // A rank of the current epoch asks for the next one: it reset (its
    // state saw ranks waiting to join); the others must follow.
    for (const Waiter* w : waiting_) {
      if (w->join.previous_epoch == epoch_ && members_.count(w->join.previous_rank) > 0) {
        int joiners = 0;
        for (const Waiter* o : waiting_) joiners += o->join.previous_epoch != epoch_ ? 1 : 0;
        EndEpochLocked(absl::StrCat("rank ", w->join.previous_rank, " reset (", joiners,
                                    " rank(s) waiting to join)"));
        break;
      }
    }
    if (!ended_) return;  // joiners wait for the next reset
  }
  for (const auto& [rank, member] : members_) {
    if (!MemberSettledLocked(rank, member, now)) return;
  }
  if (static_cast<int>(waiting_.size()) < min_size_) return;
  FormLocked(now);
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
  std::shared_ptr<Job> job = make_job_(size, epoch);

  EpochRecord record;
  record.epoch = epoch;
  record.at = now;
  record.size = size;
  record.reason = epoch_ == 0 ? "started" : end_reason_;
  int survivors = 0;
  for (int rank = 0; rank < size; ++rank) {
    Waiter* w = order[rank];
    if (std::get<0>(key(w)) == 0) {
      ++survivors;
    } else if (epoch_ > 0) {
      record.joined.push_back(rank);
    }
    w->status = job->AttachRank(rank, w->join.session_id, w->join.pid);
    w->seat = ElasticSeat{job, rank, size, epoch};
    w->seated = true;
  }
  record.left = epoch_ == 0 ? 0 : static_cast<int>(members_.size()) - survivors;
  waiting_.erase(
      std::remove_if(waiting_.begin(), waiting_.end(), [](const Waiter* w) { return w->seated; }),
      waiting_.end());
  members_.clear();
  for (int rank = 0; rank < size; ++rank) members_[rank] = Member{};
  spdlog::info("job {}: epoch {} formed with {} rank(s) ({}; joined: {}, left: {})", job_id_, epoch,
               size, record.reason,
               record.joined.empty() ? std::string("none") : FormatRankRanges(record.joined),
               record.left);
  history_.push_back(std::move(record));
  if (history_.size() > kMaxHistory) history_.erase(history_.begin());
  epoch_ = epoch;
  current_ = std::move(job);
  ended_ = false;
  end_reason_.clear();
}

ElasticView ElasticGroup::View() const {
  absl::MutexLock l(&mu_);
  ElasticView v;
  v.epoch = epoch_;
  int joiners = 0;
  for (const Waiter* w : waiting_) joiners += w->join.previous_epoch != epoch_ ? 1 : 0;
  if (max_size_ > 0) {
    joiners = std::min(joiners, std::max(0, max_size_ - static_cast<int>(members_.size())));
  }
  v.joiners_waiting = epoch_ == 0 ? 0 : joiners;
  return v;
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
