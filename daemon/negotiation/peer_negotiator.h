// PeerNegotiator: the negotiator of a job that spans nodes. It hands every
// locally ready name to the job's coordinator (over a MemberLink: a gRPC
// stream, or a direct call when this daemon hosts rank 0), keeps it parked
// until the coordinator's plan names it, and runs the plan on its own thread
// in plan order: each planned response is resolved to this node's parked
// tensors and handed to the job's executor with the host multi-node backend
// (made here once the Welcome says where every rank lives) or, for device
// tensors, the job's NCCL backend. A response of a process set that has no
// rank here is skipped in step (its sequence number still advances).
//
// Direct rounds (ready_rounds.h, wired to the job by direct_rounds.h): when
// the Welcome says so, a name every node has cached (process set 0, host
// memory, not grouped) is not reported to the coordinator; the nodes
// exchange ready bits over the data plane, and what a round's close runs is
// planned here. The coordinator's plans wait, in their place in the order
// (plan_order.h), until the coordinator's node's round message releases
// them.
//
// Failure: a lost coordinator or peer aborts the job (StepRunner::AbortJob).
// After the job ended here, the responses already planned still run while
// the transport lives (a short grace): when another node ends the job
// because its ranks finished, this node may still be receiving that node's
// last bytes of a response that can complete.
//
// Thread-safety: thread-safe. The link's threads call the listener methods;
// the plan runs on the negotiator's own thread, so the link keeps reading
// heartbeats while data moves.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/negotiation/direct_rounds.h"
#include "daemon/negotiation/negotiator.h"
#include "daemon/negotiation/plan_order.h"
#include "daemon/transport/sealed_lane.h"
#include "daemon/transport/transport.h"
#include "daemon/wire/member_link.h"
#include "daemon/wire/peer_service.h"
#include "daemon/wire/peer_tls.h"

namespace kolo::daemon {

struct PeerNegotiatorOptions {
  std::string job_id;
  std::string job_token;
  int size = 0;  // ranks in the job
  std::string node_name;
  // Where the coordinator is: in this daemon (when it hosts rank 0; then
  // `coordinators` is set) or remote at `coordinator_address`.
  CoordinatorRegistry* coordinators = nullptr;
  std::string coordinator_address;
  // How this daemon's Peer plane is secured; null when it is off (a job
  // spanning nodes then fails to start, saying how to turn it on).
  std::shared_ptr<const PeerCredentials> peer_credentials;
  absl::Duration peer_timeout = absl::Seconds(10);
  absl::Duration connect_timeout = absl::Seconds(10);
  // Makes the job's transport (UCX in kolod); must outlive the negotiator.
  TransportFactory* transports = nullptr;
  // Makes the backend of the job's host-memory responses over the connected
  // transport, given every rank's node index.
  std::function<std::unique_ptr<Backend>(Transport* transport, std::vector<int> node_of)>
      make_host_backend;
  // The job's settings as its ranks here asked for them (sent in Hello), as
  // in force here (the coordinator's, on rank 0's node), and this kolod's
  // bound on the fusion threshold.
  kolo::v1::JobSettings asked_settings;
  plan::JobSettings settings;
  uint64_t fusion_threshold_cap = uint64_t{64} << 20;
};

class PeerNegotiator final : public Negotiator, public LinkListener {
 public:
  // `runner` must outlive the negotiator.
  PeerNegotiator(PeerNegotiatorOptions options, StepRunner* runner);
  ~PeerNegotiator() override;

  // Creates the transport, connects to the coordinator and says Hello.
  absl::Status Start(std::vector<int> local_ranks) override;
  void LocallyReady(ReadySet set) override;
  // The reports of this batch of submissions go out now (over the
  // transport's message lane once connected; see member_link.h).
  void Progress() override;
  bool Waiting(int process_set, const std::string& name) override;
  std::vector<WaitingName> WaitingNames() override;
  void Abort(const absl::Status& why) override;
  bool joins_with_process_sets() const override { return false; }
  bool has_peers() const override { return true; }
  bool takes_caller_memory() const override { return false; }
  // The coordinator's tuner, on rank 0's node.
  absl::StatusOr<plan::TunerReport> Autotune(uint32_t since) const override;
  uint64_t data_plane_messages() const override {
    return lane_messages_.load(std::memory_order_relaxed);
  }

  void OnWelcome(const kolo::v1::Welcome& welcome) override;
  void OnPlan(std::vector<PlannedEntry> plan) override;
  void OnLinkAbort(const absl::Status& why) override;

 private:
  void ExecuteLoop();
  // Aborts the transport once the job has ended here, after the response
  // being executed has had a moment to finish (see the header comment).
  void AbortTransportLoop();
  // Resolves `entry` to this node's step and runs it (the numbered steps
  // are in the .cc file).
  void Execute(PlannedEntry entry);
  // Whether this node hosts a rank of `entry`'s process set (its ranks go
  // to `set_ranks`, null for every rank).
  bool HostsSetOf(const PlannedEntry& entry,
                  std::shared_ptr<const std::vector<int>>* set_ranks) const;
  void RunJoined(const PlannedEntry& entry, uint64_t sequence,
                 std::shared_ptr<const std::vector<int>> set_ranks);
  // This node's parked sets of `entry`'s names (a missing one turns
  // entry.error into INTERNAL); `aborted` is why the job ended, if it did.
  std::vector<ReadySet> TakeParked(PlannedEntry& entry, absl::Status* aborted);
  // A planned response failed CheckPlannedEntry: fails `sets` and ends the
  // job with `why`.
  void RefusePlan(std::vector<ReadySet> sets, const absl::Status& why);
  // Completes `sets` if the response cannot run here; returns whether it did.
  bool Settled(const PlannedEntry& entry, const absl::Status& aborted, std::vector<ReadySet>& sets,
               uint64_t sequence);
  void RunCollective(PlannedEntry entry, std::vector<ReadySet> sets, uint64_t sequence,
                     std::shared_ptr<const std::vector<int>> set_ranks);
  // The step of a response whose ranks here all joined (no tensors here).
  PlannedStep JoinedStep(const PlannedEntry& entry);
  // A control step (join done, process-set change) of the plan.
  PlannedStep ControlStep(const PlannedEntry& entry, std::vector<ReadySet> sets);

  // A message over the transport's lane: a member's Ready for the local
  // coordinator, or a plan from the coordinator's node for the link.
  void OnLaneMessage(int peer, absl::string_view message);
  // Reports go over the lane once both the link and the connected transport
  // exist (whichever comes last calls this).
  void UseLaneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane_mu_);

  // A direct round's message from node `peer` (after its marker byte).
  void OnRoundMessage(int peer, absl::string_view message);
  // Sends what the rounds have due and applies it, in order.
  void PumpRoundsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(rounds_mu_);
  // Reports spilled names to the coordinator (the executor thread).
  void ReportSpilled(std::vector<kolo::v1::TensorMeta> metas);

  const PeerNegotiatorOptions options_;
  StepRunner* const runner_;
  std::vector<int> local_ranks_;  // set by Start

  // Who takes the lane's messages; outlives the transport, whose thread
  // delivers them. Cleared before the link and the coordinator's use end.
  mutable absl::Mutex lane_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  bool lane_open_ ABSL_GUARDED_BY(lane_mu_) = false;
  std::shared_ptr<Coordinator> coordinator_ ABSL_GUARDED_BY(lane_mu_);  // when it is here
  MemberLink* lane_link_ ABSL_GUARDED_BY(lane_mu_) = nullptr;
  // The link whose reports Progress sends: over the lane, or to the
  // coordinator in this daemon.
  MemberLink* flush_link_ ABSL_GUARDED_BY(lane_mu_) = nullptr;
  bool lane_connected_ ABSL_GUARDED_BY(lane_mu_) = false;
  std::atomic<uint64_t> lane_messages_{0};  // taken, for the job's status
  int coordinator_node_ ABSL_GUARDED_BY(lane_mu_) = -1;
  int self_node_ ABSL_GUARDED_BY(lane_mu_) = -1;
  // The transport's lane under the job's key (made on the Welcome, before
  // Connect); outlives the transport, whose handler it is.
  std::unique_ptr<SealedLane> sealed_lane_ ABSL_GUARDED_BY(lane_mu_);

  // The direct rounds, made on a Welcome that asks for them (before
  // Connect: the transport's thread may deliver their messages from then).
  // rounds_on_ says they were made, so that a job without them takes no
  // rounds lock per batch of submissions.
  mutable absl::Mutex rounds_mu_ ABSL_ACQUIRED_AFTER(lane_mu_) ABSL_ACQUIRED_BEFORE(mu_);
  std::unique_ptr<DirectRounds> rounds_ ABSL_GUARDED_BY(rounds_mu_);
  std::atomic<bool> rounds_on_{false};

  std::unique_ptr<JobTransport> transport_;
  std::unique_ptr<MemberLink> link_;

  absl::Mutex mu_;
  bool welcomed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  absl::Time release_deadline_ ABSL_GUARDED_BY(mu_);  // see kReleaseGrace
  bool executing_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, ReadySet> parked_ ABSL_GUARDED_BY(mu_);
  // Sets refused on arrival (a name already parked), failed by the executor
  // thread (LocallyReady runs under the job's lock and completes nothing).
  std::vector<std::pair<ReadySet, absl::Status>> refused_ ABSL_GUARDED_BY(mu_);
  std::deque<PlannedEntry> plan_ ABSL_GUARDED_BY(mu_);
  // The coordinator's plans and the rounds' entries, merged in the order
  // every node runs them; what may run moves to plan_.
  PlanOrder order_ ABSL_GUARDED_BY(mu_);
  // Names the rounds moved to the coordinator, for the executor to report.
  std::vector<kolo::v1::TensorMeta> spilled_ ABSL_GUARDED_BY(mu_);
  // Made on the Welcome (with the rank-to-node map), before any plan runs.
  std::unique_ptr<Backend> host_backend_ ABSL_GUARDED_BY(mu_);

  // Executor thread only: the plan's sequence number, the process sets (by
  // id, as the plan numbered them) and the node of every rank.
  uint64_t sequence_ = 0;
  std::map<int, std::shared_ptr<const std::vector<int>>> sets_;
  std::vector<int> node_of_;
  Backend* backend_ = nullptr;

  std::thread executor_;
  std::thread transport_aborter_;
};

}  // namespace kolo::daemon
