#include "daemon/job/job_registry.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/secret_compare.h"
#include "daemon/elastic/elastic_leader.h"

namespace kolo::daemon {
namespace {}  // namespace

absl::Status JobRegistry::SetSettings(const kolo::v1::JobSettings& asked, JobLayout* layout) const {
  absl::StatusOr<plan::JobSettings> settings =
      plan::Resolve(asked, plan::JobSettingsBounds{fusion_threshold_, limits_.max_cache_capacity});
  if (!settings.ok()) return settings.status();
  layout->asked_settings = asked;
  layout->settings = *settings;
  layout->fusion_threshold_cap = fusion_threshold_;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::MakeJob(const JoinRequest& request) const {
  JobLayout layout;
  layout.local_size = request.local_size;
  layout.coordinator = request.coordinator;
  layout.env = multi_node_;
  layout.limits = limits_;
  if (absl::Status s = SetSettings(request.settings, &layout); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("job ", request.job_id, ": ", s.message()));
  }
  const uint64_t threshold = layout.settings.fusion_threshold_bytes;
  return std::make_shared<Job>(request.job_id, request.job_token, request.size, backend_, threshold,
                               negotiators_, observers_, std::move(layout), device_backends_);
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::Join(const JoinRequest& request) {
  std::shared_ptr<Job> job;
  {
    absl::ReleasableMutexLock l(&mu_);
    const Key key(request.uid, request.job_id);
    auto it = jobs_.find(key);
    bool fresh = it == jobs_.end();
    std::shared_ptr<Job> previous;  // an ended incarnation this attach replaces
    if (fresh) {
      if (draining_) {
        return absl::UnavailableError(
            absl::StrCat("kolod is draining: it starts no new job (job ", request.job_id, ")"));
      }
      absl::StatusOr<std::shared_ptr<Job>> made = MakeJob(request);
      if (!made.ok()) return made.status();
      job = *std::move(made);
      jobs_[key] = job;
    } else {
      job = it->second;
      if (job->elastic_epoch() > 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("job ", request.job_id, " is elastic; rank ", request.rank,
                         " attaches without KOLO_ELASTIC (every rank of a job must agree)"));
      }
      if (!SecretsEqual(job->token(), request.job_token)) {
        return absl::PermissionDeniedError(
            absl::StrCat("job ", request.job_id, ": wrong job token for rank ", request.rank));
      }
      JobLayout asked;
      asked.local_size = request.local_size;
      asked.coordinator = request.coordinator;
      if (job->spans_nodes() != SpansNodes(request.size, asked)) {
        return absl::FailedPreconditionError(
            absl::StrCat("job ", request.job_id, ": rank ", request.rank,
                         " disagrees with the job's other local ranks on whether it spans nodes"));
      }
      if (job->size() != request.size) {
        return absl::FailedPreconditionError(absl::StrCat("job ", request.job_id, " has size ",
                                                          job->size(), ", rank ", request.rank,
                                                          " says ", request.size));
      }
      if (!job->AbortStatus().ok()) {
        // The job ended (a rank shut down or died) while other ranks are
        // still attached to it: this attach starts the job again (Horovod's
        // shutdown() then init()). The old incarnation's ranks keep their
        // Job, whose collectives fail, until they detach and attach anew.
        if (draining_) {
          return absl::UnavailableError(absl::StrCat(
              "kolod is draining: it starts no new job (job ", request.job_id, " ended)"));
        }
        absl::StatusOr<std::shared_ptr<Job>> made = MakeJob(request);
        if (!made.ok()) return made.status();
        previous = std::move(job);
        job = *std::move(made);
        fresh = true;
        jobs_[key] = job;
      } else if (absl::Status same =
                     plan::SameAsked(job->asked_settings(), "the job's first rank here",
                                     request.settings, absl::StrCat("rank ", request.rank));
                 !same.ok()) {
        // The job cannot run without this rank: it ends for the ranks
        // attached too, saying why.
        const absl::Status why(same.code(),
                               absl::StrCat("job ", request.job_id, ": ", same.message()));
        l.Release();
        job->Abort(why);
        return why;
      }
    }
    // Under mu_ so that a rank cannot join a job that is being dropped.
    absl::Status attached = job->AttachRank(request.rank, request.session_id, request.pid);
    if (!attached.ok()) {
      if (previous != nullptr) {
        jobs_[key] = std::move(previous);
      } else if (fresh) {
        jobs_.erase(key);
      }
      return attached;
    }
  }
  return job;
}

absl::StatusOr<ElasticSeat> JobRegistry::JoinElastic(const JoinRequest& request,
                                                     const ElasticJoin& join,
                                                     const std::function<bool()>& cancelled) {
  const Key key(request.uid, request.job_id);
  std::shared_ptr<ElasticGroup> group;
  {
    absl::MutexLock l(&mu_);
    // Memberships nobody holds any more (every rank gone, no rejoin due).
    const absl::Time now = absl::Now();
    for (auto it = elastic_.begin(); it != elastic_.end();) {
      auto next = std::next(it);
      if (it->first != key && it->second->Idle(now) && jobs_.count(it->first) == 0) {
        elastic_.erase(it);
      }
      it = next;
    }
    auto job = jobs_.find(key);
    if (job != jobs_.end() && job->second->elastic_epoch() == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", request.job_id, " is not elastic; rank ", request.rank,
                       " attaches with KOLO_ELASTIC (every rank of a job must agree)"));
    }
    auto it = elastic_.find(key);
    if (it != elastic_.end() && !join.joiner && join.previous_epoch == 0 &&
        it->second->Finished()) {
      // The job ran before under this id and finished: this is a new run.
      elastic_.erase(it);
      it = elastic_.end();
    }
    if (it == elastic_.end()) {
      if (draining_) {
        return absl::UnavailableError(
            absl::StrCat("kolod is draining: it starts no new job (job ", request.job_id, ")"));
      }
      const std::string id = request.job_id;
      const std::string token = request.job_token;
      // Every epoch runs with the settings the job's first rank asked for.
      JobLayout settings;
      if (absl::Status s = SetSettings(request.settings, &settings); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("job ", request.job_id, ": ", s.message()));
      }
      auto make_job = [this, id, token, settings](const EpochLayout& epoch) {
        JobLayout layout = settings;
        layout.local_size = epoch.local_size;
        layout.coordinator = epoch.coordinator;
        layout.env = multi_node_;
        layout.limits = limits_;
        layout.elastic_epoch = epoch.epoch;
        // Each epoch negotiates under an id of its own: its coordinator is
        // the node of its rank 0, which may not be the last one's.
        if (!epoch.coordinator.empty()) {
          layout.negotiation_id = absl::StrCat(id, ":e", epoch.epoch);
        }
        const uint64_t threshold = layout.settings.fusion_threshold_bytes;
        return std::make_shared<Job>(id, token, epoch.size, backend_, threshold, negotiators_,
                                     observers_, std::move(layout), device_backends_);
      };
      std::optional<Spanning> spanning;
      JobLayout asked;
      asked.local_size = request.local_size;
      asked.coordinator = request.coordinator;
      const bool spans = SpansNodes(request.size, asked);
      if (spans) {
        if (multi_node_.rendezvous == nullptr || multi_node_.peer_address.empty()) {
          return absl::FailedPreconditionError(
              absl::StrCat("job ", request.job_id,
                           " is elastic across nodes, but this kolod's Peer plane is "
                           "off (see kolod --peer_address)"));
        }
        if (request.coordinator.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("job ", request.job_id,
                           ": an elastic job across nodes needs KOLO_COORDINATOR "
                           "(the Peer address of the daemon that forms its first epoch)"));
        }
        spanning = Spanning{multi_node_.rendezvous, multi_node_.node_name, multi_node_.peer_address,
                            request.coordinator, request.local_size};
        if (multi_node_.elastic_leaders != nullptr) {
          spanning->expected = multi_node_.elastic_leaders->Expect(id, token);
        }
      }
      it = elastic_
               .emplace(key, std::make_shared<ElasticGroup>(id, token, std::move(make_job),
                                                            elastic_limits_.rejoin_grace,
                                                            std::move(spanning)))
               .first;
    } else if (!SecretsEqual(it->second->token(), request.job_token)) {
      return absl::PermissionDeniedError(
          absl::StrCat("job ", request.job_id, ": wrong job token for rank ", request.rank));
    }
    group = it->second;
  }
  auto seat = group->Join(join, absl::Now() + elastic_limits_.timeout, cancelled);
  if (!seat.ok()) return seat.status();
  absl::MutexLock l(&mu_);
  std::shared_ptr<Job>& current = jobs_[key];
  if (current == nullptr || current->elastic_epoch() < seat->epoch) current = seat->job;
  return seat;
}

void JobRegistry::Leave(const std::shared_ptr<Job>& job, uid_t uid, int rank, bool clean,
                        const absl::Status& why, bool rejoin) {
  // An elastic group's ended epoch, dropped after the lock (its end joins
  // the job's threads).
  std::shared_ptr<Job> ended_epoch;
  absl::MutexLock l(&mu_);
  const Key key(uid, job->id());
  if (job->RankLeft(rank, clean, why) == 0) {
    auto it = jobs_.find(key);
    if (it != jobs_.end() && it->second == job) jobs_.erase(it);
  }
  if (job->elastic_epoch() > 0) {
    auto group = elastic_.find(key);
    if (group != elastic_.end()) {
      // The group stays when its ranks are all gone (finished: it refuses
      // late joiners); the next elastic attach of another job drops it.
      ended_epoch = group->second->Left(job->elastic_epoch(), rank, clean, rejoin, why);
    }
  }
}

ElasticView JobRegistry::Elastic(uid_t uid, const std::string& job_id) const {
  std::shared_ptr<ElasticGroup> group;
  {
    absl::MutexLock l(&mu_);
    auto it = elastic_.find(Key(uid, job_id));
    if (it == elastic_.end()) return {};
    group = it->second;
  }
  // Across nodes, joiners on other nodes wait at the leader (the node of
  // rank 0): its ranks tell the others at their next commit.
  const int remote = multi_node_.elastic_leaders == nullptr
                         ? 0
                         : multi_node_.elastic_leaders->JoinersWaiting(job_id, group->token(),
                                                                       multi_node_.node_name);
  return group->View(remote);
}

std::vector<EpochRecord> JobRegistry::Epochs(uid_t uid, const std::string& job_id) const {
  std::shared_ptr<ElasticGroup> group;
  {
    absl::MutexLock l(&mu_);
    auto it = elastic_.find(Key(uid, job_id));
    if (it == elastic_.end()) return {};
    group = it->second;
  }
  return group->History();
}

std::vector<JobSnapshot> JobRegistry::Snapshot() const {
  std::vector<JobSnapshot> out;
  for (const OwnedJob& owned : Owned()) {
    out.push_back(owned.job->Snapshot());
    out.back().uid = owned.uid;
    if (owned.job->elastic_epoch() > 0) out.back().epochs = Epochs(owned.uid, owned.job->id());
  }
  return out;
}

std::vector<JobRegistry::OwnedJob> JobRegistry::Owned() const {
  absl::MutexLock l(&mu_);
  std::vector<OwnedJob> jobs;
  for (const auto& [key, job] : jobs_) jobs.push_back(OwnedJob{key.first, job});
  return jobs;
}

std::vector<std::shared_ptr<Job>> JobRegistry::Jobs() const {
  std::vector<std::shared_ptr<Job>> jobs;
  for (OwnedJob& owned : Owned()) jobs.push_back(std::move(owned.job));
  return jobs;
}

std::vector<JobRegistry::OwnedJob> JobRegistry::Find(const std::string& job_id) const {
  std::vector<OwnedJob> out;
  for (OwnedJob& owned : Owned()) {
    if (owned.job->id() == job_id) out.push_back(std::move(owned));
  }
  return out;
}

int JobRegistry::size() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(jobs_.size());
}

void JobRegistry::SetDraining(bool draining) {
  absl::MutexLock l(&mu_);
  draining_ = draining;
}

bool JobRegistry::draining() const {
  absl::MutexLock l(&mu_);
  return draining_;
}

}  // namespace kolo::daemon
