// ElasticGroup: the membership of one elastic job on this node. Its ranks run
// in epochs; each epoch is a fresh Job (its own request table, response
// cache, process sets and communicators) whose ranks are numbered densely.
//
// An epoch ends when one of its ranks dies or leaves (the Job fails the
// others' collectives with MEMBERSHIP_CHANGED) or when a rank resets into
// the next epoch on its own (after its elastic state saw ranks waiting to
// join at a commit). The next epoch forms once every rank of the ended one
// has either attached again (asking for the next epoch, with its previous
// rank) or is gone: died, left for good, or did not come back within the
// rejoin grace after detaching to rejoin. Ranks keep their order: the
// survivors first, by their previous rank (so the new rank 0 holds the last
// committed state), then the joiners (restarted ranks, added hosts) in the
// order they attached. An epoch needs at least min_size ranks and takes at
// most max_size; an attach waits up to its deadline for one to form.
//
// The first epoch forms when as many ranks attached as the first of them
// asked for (the job's initial size), ordered by the ranks they asked for.
//
// A job that spans nodes (Spanning below) follows the same rules, but the
// epoch is formed by the job's membership leader (negotiation/
// elastic_leader.h): once this node's ranks are settled, one waiting attach
// reports them over Peer.Rendezvous and polls until the leader answers with
// their ranks; when the leader cannot be reached it tries the ended epoch's
// other nodes in rank order (the leader's successors).
//
// Thread-safety: thread-safe (one mutex; waiting attaches sleep on it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/job/job.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon {

// One attach of an elastic job's rank.
struct ElasticJoin {
  std::string session_id;
  int64_t pid = 0;
  int hint_rank = 0;  // the rank it asked for (orders the first epoch)
  int size = 1;       // the job's initial size, as it asked
  int min_size = 1;
  int max_size = 0;     // 0: no bound
  bool joiner = false;  // started after the job began
  int previous_rank = -1;
  uint64_t previous_epoch = 0;
};

// Where an attach landed: rank `rank` of `size` in epoch `epoch`, attached
// to `job` (the epoch's Job), local rank `local_rank` of this node's
// `local_size`.
struct ElasticSeat {
  std::shared_ptr<Job> job;
  int rank = 0;
  int size = 0;
  uint64_t epoch = 0;
  int local_rank = 0;
  int local_size = 0;
};

// How an epoch's Job is laid out.
struct EpochLayout {
  int size = 0;
  uint64_t epoch = 0;
  int local_size = 0;       // ranks on this node
  std::string coordinator;  // empty on one node
};

// Calls Peer.Rendezvous of the daemon at an address.
class RendezvousCaller {
 public:
  virtual ~RendezvousCaller() = default;
  virtual absl::StatusOr<kolo::v1::ElasticFormed> Call(const std::string& address,
                                                       const kolo::v1::ElasticReport& report) = 0;
};

// An elastic job across nodes, as this node takes part in it.
struct Spanning {
  RendezvousCaller* rendezvous = nullptr;
  std::string node;     // this daemon's node name
  std::string address;  // this daemon's Peer address
  std::string leader;   // the first epoch's leader (KOLO_COORDINATOR)
  int local_size = 1;   // the first epoch's ranks on this node
  // Held while the group lives: this daemon's Peer.Rendezvous takes the
  // job's reports (elastic_leader.h). Null where none leads here.
  std::shared_ptr<const void> expected;
};

struct ElasticView {
  uint64_t epoch = 0;  // the current epoch (0 before the first formed)
  int joiners_waiting = 0;
};

class ElasticGroup {
 public:
  using MakeJob = std::function<std::shared_ptr<Job>(const EpochLayout& layout)>;

  // `spanning`: the job spans nodes (its rendezvous must outlive the group);
  // null on one node.
  ElasticGroup(std::string job_id, std::string token, MakeJob make_job, absl::Duration rejoin_grace,
               std::optional<Spanning> spanning = std::nullopt);

  const std::string& token() const { return token_; }
  // Every rank of its last epoch left or died: no epoch forms any more.
  bool Finished() const;

  // Waits until an epoch with this rank forms, `deadline` passes
  // (DEADLINE_EXCEEDED naming how many ranks wait and how many are needed)
  // or `cancelled` says the caller is gone (CANCELLED). The seat's rank is
  // attached to its job already.
  absl::StatusOr<ElasticSeat> Join(const ElasticJoin& join, absl::Time deadline,
                                   const std::function<bool()>& cancelled);

  // Rank `rank` of epoch `epoch` left: cleanly, or it died with `why`.
  // `rejoin`: it detached to attach again for the next epoch. Returns the
  // ended epoch's Job once none of its ranks here is attached (the group
  // holds it no longer; the caller drops it outside its locks, since its
  // end joins the Job's threads), else null.
  std::shared_ptr<Job> Left(uint64_t epoch, int rank, bool clean, bool rejoin,
                            const absl::Status& why);

  // The epoch and the joiners waiting for the next one: this node's and
  // `remote_joiners` waiting on other nodes (at the leader).
  ElasticView View(int remote_joiners = 0) const;
  // Nothing attached, waiting or expected back: the registry may drop it.
  bool Idle(absl::Time now) const;
  // Every epoch so far (the last 64), oldest first.
  std::vector<EpochRecord> History() const;

 private:
  struct Waiter {
    ElasticJoin join;
    uint64_t arrival = 0;
    bool reported = false;  // part of a rendezvous call in flight
    bool seated = false;
    absl::Status status;  // of attaching the seat's rank
    ElasticSeat seat;
  };
  struct Member {
    bool attached = true;
    bool gone = false;                                    // died or left for good
    absl::Time rejoin_deadline = absl::InfiniteFuture();  // detached to rejoin
  };

  // Ends the current epoch (fails its collectives) for `reason`.
  void EndEpochLocked(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forms the next epoch when its rule says so.
  void MaybeFormLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MemberSettledLocked(int rank, const Member& member, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FormLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the epoch when a rank of it asks for the next one.
  void EndOnResetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Across nodes: reports this node's waiting ranks to the leader when they
  // are settled, and seats them once the leader formed their epoch. Unlocks
  // mu_ while it calls.
  void MaybeReportLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyFormedLocked(const kolo::v1::ElasticFormed& formed, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailWaitersLocked(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status FinishedError() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Attaches the placed waiters (rank, waiter; in local-rank order) to the
  // epoch's `job` and makes it the current one.
  void InstallEpochLocked(std::shared_ptr<Job> job, uint64_t epoch, int size,
                          const std::vector<std::pair<int, Waiter*>>& placed,
                          const std::string& reason, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string job_id_;
  const std::string token_;
  const MakeJob make_job_;
  const absl::Duration rejoin_grace_;
  const std::optional<Spanning> spanning_;
  mutable absl::Mutex mu_;
  // Across nodes: the leader to report to, the ended epoch's nodes and
  // leader, the addresses that failed since, and whether a call is out.
  std::string leader_address_ ABSL_GUARDED_BY(mu_);
  std::string leader_name_ ABSL_GUARDED_BY(mu_);
  std::vector<kolo::v1::ElasticNode> nodes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> unreachable_ ABSL_GUARDED_BY(mu_);
  bool reporting_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<Job> current_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  // Every rank of the last epoch left or died: no epoch forms any more.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::string end_reason_ ABSL_GUARDED_BY(mu_);
  int initial_size_ ABSL_GUARDED_BY(mu_) = 0;
  int min_size_ ABSL_GUARDED_BY(mu_) = 1;
  int max_size_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int, Member> members_ ABSL_GUARDED_BY(mu_);  // ranks of the current epoch
  std::vector<Waiter*> waiting_ ABSL_GUARDED_BY(mu_);
  uint64_t arrivals_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<EpochRecord> history_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kolo::daemon
