// Coordinator: the global half of a multi-node job's negotiation, run by the
// daemon that hosts rank 0 (see the numbered protocol in
// proto/kolo/v1/peer.proto). It learns which names each node has locally
// ready, checks that the nodes agree on each tensor, orders globally ready
// names identically for everyone, fuses them and sends the plan to every
// member. The agreement and fusion rules are the one node's
// (daemon/plan/). A repeated name is assigned a cache id, so it travels as one bit.
//
// Its parts, each a class of its own under its lock: the members and the
// node order (membership.h), the readiness tally (readiness.h) with the
// response cache (response_cache.h), and the planner (planner.h); this
// class takes reports, numbers and delivers plans, and ends the job.
//
// It knows nothing of gRPC: members are MemberSinks (a gRPC stream for a
// remote daemon, a direct call for the local one). Once its daemon's
// transport is connected (UseLane), a remote member that reports over the
// transport's message lane gets its plans over the lane too (see
// member_link.h); anything the lane cannot take goes to the member's sink.
//
// Thread-safety: thread-safe; one mutex guards the state, and sinks are
// called outside it, under a second mutex taken before the first is
// released, so every sink sees messages in the order the state changed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/coordinator/coordinator_lane.h"
#include "daemon/coordinator/coordinator_options.h"
#include "daemon/coordinator/member_sink.h"
#include "daemon/coordinator/membership.h"
#include "daemon/coordinator/planner.h"
#include "daemon/coordinator/readiness.h"
#include "daemon/coordinator/response_cache.h"
#include "daemon/plan/process_set_registry.h"
#include "daemon/transport/transport.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon {

class Coordinator {
 public:
  Coordinator(std::string job_id, std::string token, int size, CoordinatorOptions options);

  const std::string& job_id() const { return job_id_; }
  // Whether `token` is the job's (compared in constant time).
  bool HasToken(const std::string& token) const;

  // A member said Hello. Returns its member id (stable for its lifetime) or
  // the reason it is refused (wrong token or size, ranks taken). Once the
  // members cover every rank, each gets its Welcome.
  absl::StatusOr<int> AddMember(const kolo::v1::Hello& hello, std::shared_ptr<MemberSink> sink);
  void OnReady(int member, const kolo::v1::Ready& ready);
  // Plans to members that report over `lane` (this daemon's connected
  // transport) go over it from now on; null stops using it (before the
  // transport goes). Thread-safe against deliveries in progress.
  void UseLane(MessageLane* lane);
  // A message over the lane from node `node_index` (verified as that node's,
  // see sealed_lane.h): a Ready report of the member there. Anything else
  // ends the job, naming the node.
  void OnLaneMessage(int node_index, absl::string_view message);
  // A member's stream ended or fell silent: the job is aborted everywhere.
  void MemberLost(int member, const std::string& why);
  void OnAbort(int member, const absl::Status& why);
  void Heartbeat(int member);

  // Sends heartbeats, and aborts the job if a member has been silent longer
  // than `timeout` at `now`. Returns false once the job is over.
  bool Tick(absl::Time now, absl::Duration timeout);
  bool aborted() const;
  // Members still connected.
  int members() const;
  // The job's fusion tuner, once every node said Hello, when the job
  // autotunes (FAILED_PRECONDITION otherwise).
  absl::StatusOr<plan::TunerReport> Autotune(uint32_t since) const;

 private:
  void WelcomeLocked(MemberOutbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Plans what is globally ready and sends the plan, numbered, to every
  // connected member (over the lane to those that report over it).
  void PlanLocked(MemberOutbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortLocked(const absl::Status& why, MemberOutbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases `state` and sends `out`, in the order the state changed.
  void Deliver(absl::ReleasableMutexLock& state, MemberOutbox* out) ABSL_UNLOCK_FUNCTION(mu_);

  const std::string job_id_;
  const std::string token_;
  const kolo::v1::JobSettings asked_settings_;
  const uint64_t fusion_threshold_;
  const plan::AutotuneSettings autotune_;
  const bool direct_ready_;

  mutable absl::Mutex mu_;
  // The smallest bound on the fusion threshold of the nodes so far.
  uint64_t fusion_cap_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
  // Whether every node so far can take part in direct rounds.
  bool all_direct_ ABSL_GUARDED_BY(mu_) = true;
  std::unique_ptr<plan::FusionTuner> tuner_ ABSL_GUARDED_BY(mu_);
  absl::Mutex deliver_mu_ ABSL_ACQUIRED_AFTER(mu_);
  const std::shared_ptr<PlanLane> lane_;
  uint64_t plans_ ABSL_GUARDED_BY(mu_) = 0;  // sent so far; numbers the next
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  // aborted_, readable without mu_ (the registry asks from its own locks).
  std::atomic<bool> aborted_flag_{false};
  // Ready reports that arrived before every node was known, by member.
  std::map<int, std::vector<kolo::v1::Ready>> early_ ABSL_GUARDED_BY(mu_);
  Membership members_ ABSL_GUARDED_BY(mu_);
  // Process sets by id; ids in plan order.
  plan::ProcessSetRegistry sets_ ABSL_GUARDED_BY(mu_);
  ResponseCache cache_ ABSL_GUARDED_BY(mu_);
  Readiness readiness_ ABSL_GUARDED_BY(mu_);
  Planner planner_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kolo::daemon
