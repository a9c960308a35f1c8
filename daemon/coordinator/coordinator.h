// Coordinator: the global half of a multi-node job's negotiation, run by the
// daemon that hosts rank 0 (see the numbered protocol in
// proto/kolo/v1/peer.proto). It learns which names each node has locally
// ready, checks that the nodes agree on each tensor, orders globally ready
// names identically for everyone, fuses them and sends the plan to every
// member. The agreement and fusion rules are the one node's
// (daemon/plan/). A repeated name is assigned a cache id, so it travels as one bit.
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
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/coordinator/coordinator_lane.h"
#include "daemon/coordinator/member_sink.h"
#include "daemon/plan/join_tracker.h"
#include "daemon/plan/process_set_registry.h"
#include "daemon/plan/tensor_desc.h"
#include "daemon/transport/transport.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon {

// The key of a tensor name within its process set (names are per set).
inline std::string PeerKey(int process_set, const std::string& name) {
  return absl::StrCat(process_set, ":", name);
}

struct CoordinatorOptions {
  uint64_t fusion_threshold_bytes = uint64_t{64} << 20;
  uint32_t cache_capacity = 1024;
  // Makes the NCCL unique id of the job's device communicator (this
  // daemon's DeviceBackendFactory::NewCommId); unset: device tensors fail.
  std::function<absl::StatusOr<std::string>()> new_device_comm_id;
};

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

 private:
  // The lane as the sinks see it: detachable, and serializing each message
  // once for every member it goes to.
  struct Member {
    std::string node;
    // Set once it reported over the lane: where its plans go.
    std::shared_ptr<MemberSink> lane_sink;
    std::vector<int> ranks;
    std::string ucx_address;
    std::shared_ptr<MemberSink> sink;
    int node_index = -1;
    absl::Time last_heard;
    bool connected = true;
    // Where its ranks keep device tensors (sent with its first one).
    bool has_devices = false;
    kolo::v1::DeviceLayout devices;
  };
  struct Pending {
    kolo::v1::TensorMeta meta;  // from the first node that reported
    int first_node = -1;
    std::vector<bool> reported;  // by node index
    int count = 0;
    plan::TensorDesc desc;  // of `meta`, what every other node must agree with
    absl::Status error;
    std::vector<std::vector<int64_t>> rows;    // allgather: by node index
    std::vector<std::vector<int64_t>> splits;  // alltoall: by node index
    int joined = 0;                            // ranks that had joined on the nodes that reported
  };
  struct ReadyName {
    kolo::v1::TensorMeta meta;
    absl::Status error;             // fails the name on every node
    std::vector<int> joined_nodes;  // fully joined nodes of its set, then
  };
  // A round of one cached name reported by cache bit alone (see
  // AddCachedLocked): which nodes reported it, how many, and how many must.
  struct CachedRound {
    std::vector<uint8_t> reported;  // by node index
    int count = 0;
    int expected = 0;  // nodes of its process set
    int process_set = 0;
  };
  using Outbox = std::vector<
      std::pair<std::shared_ptr<MemberSink>, std::shared_ptr<const kolo::v1::CoordinatorMessage>>>;

  void WelcomeLocked(Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddReadyLocked(int node, const kolo::v1::TensorMeta& meta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Node `node` reported cached name `id` by its bit. While no node has
  // joined (`anyone_joined`: a node all of whose ranks joined) and the name
  // has no round in pending_, this only counts nodes
  // (a name cached has agreed metadata, and a bit is that metadata): at
  // 1,024 nodes a warm step is 165,000 bits, which the general path cannot
  // take within a millisecond. Otherwise it is AddReadyLocked.
  void AddCachedLocked(int node, uint32_t id, bool anyone_joined)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the counted rounds of cached names into pending_ (before a join
  // or a full report of the same name needs the general path's state).
  void SpillCachedRoundLocked(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SpillCachedRoundsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves pending `key` to ready_ once every node of its set that has not
  // fully joined reported it.
  void MaybeCompleteLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Nodes of `process_set` all of whose ranks have joined.
  std::vector<int> JoinedNodesOfSetLocked(int process_set) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK if `p` can run with joined ranks, else why not.
  absl::Status JoinedErrorLocked(const Pending& p, const std::vector<int>& joined_nodes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Plans every name in ready_ and sends the plan to every member:
  //   1. the fusable names (agreed, neither a join nor a set change) are
  //      grouped once by the shared rule (daemon/plan/fusion.h), keeping
  //      apart names that different sets of fully joined nodes take part in;
  //   2. responses are added in the order of their first name: a failed
  //      name, a set change (applied now, in plan order), a join, or a
  //      fused group;
  //   3. the first device response carries the job's device communicator;
  //   4. the plan, numbered, goes to every connected member.
  void PlanLocked(Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds a response to `plan` that fails `meta`'s name with `error`.
  static void AddErrorResponse(const kolo::v1::TensorMeta& meta, const absl::Status& error,
                               kolo::v1::Plan* plan);
  // Applies the agreed set change `meta` and adds its response (or its
  // failure) to `plan`.
  void AddSetChangeLocked(const kolo::v1::TensorMeta& meta, kolo::v1::Plan* plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void AddJoinResponse(const kolo::v1::TensorMeta& meta, kolo::v1::Plan* plan);
  // Adds one response for `names` (indices into ready_, one fusion group
  // laid out as daemon/plan/fusion.h says) to `plan`.
  kolo::v1::PlannedResponse* AddFusedResponseLocked(const std::vector<size_t>& names,
                                                    kolo::v1::Plan* plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Names `meta` in `response` by cache id, or by name (assigning it a
  // cache id in `plan` where it may have one).
  void AddMemberLocked(const kolo::v1::TensorMeta& meta, kolo::v1::PlannedResponse* response,
                       kolo::v1::Plan* plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives the first of `device_responses` (in plan order) the job's device
  // communicator the first time there is one, or fails them all if it
  // could not be made.
  void AttachDeviceCommLocked(const std::vector<kolo::v1::PlannedResponse*>& device_responses)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendPlanLocked(kolo::v1::Plan plan, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How many nodes host a member of `process_set` (every node for 0).
  int NodesOfSetLocked(int process_set) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies an agreed add or remove of a process set (in plan order; a
  // removed set's waiting names fail in `plan`). Returns the new set's id
  // for an add, 0 for a remove, or why it cannot be applied.
  absl::StatusOr<int> ChangeSetLocked(const kolo::v1::TensorMeta& meta, kolo::v1::Plan* plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's device communicator, from every node's DeviceLayout.
  absl::StatusOr<kolo::v1::DeviceComm> MakeDeviceCommLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortLocked(const absl::Status& why, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DescribeNode(int node_index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases `state` and sends `out`, in the order the state changed.
  void Deliver(absl::ReleasableMutexLock& state, Outbox* out) ABSL_UNLOCK_FUNCTION(mu_);

  const std::string job_id_;
  const std::string token_;
  const int size_;
  const CoordinatorOptions options_;

  mutable absl::Mutex mu_;
  absl::Mutex deliver_mu_ ABSL_ACQUIRED_AFTER(mu_);
  const std::shared_ptr<PlanLane> lane_;
  uint64_t plans_ ABSL_GUARDED_BY(mu_) = 0;  // sent so far; numbers the next
  std::map<int, Member> members_ ABSL_GUARDED_BY(mu_);
  int next_member_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> rank_owner_ ABSL_GUARDED_BY(mu_);    // member id per rank
  std::vector<int> node_members_ ABSL_GUARDED_BY(mu_);  // member id by node index
  bool welcomed_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  // aborted_, readable without mu_ (the registry asks from its own locks).
  std::atomic<bool> aborted_flag_{false};
  // Ready reports that arrived before every node was known, by member.
  std::map<int, std::vector<kolo::v1::Ready>> early_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Globally ready names, in the order they became ready.
  std::vector<ReadyName> ready_ ABSL_GUARDED_BY(mu_);
  // Join: nodes all of whose ranks have joined (by node index), and the
  // last rank to join so far.
  plan::JoinTracker joins_ ABSL_GUARDED_BY(mu_);
  // The device communicator goes out once, on the first device response;
  // if it could not be made, every device response fails with why.
  bool device_comm_planned_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status device_comm_error_ ABSL_GUARDED_BY(mu_);
  // Process sets by id; ids in plan order.
  plan::ProcessSetRegistry sets_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> cache_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> cache_names_ ABSL_GUARDED_BY(mu_);
  std::vector<kolo::v1::TensorMeta> cache_meta_ ABSL_GUARDED_BY(mu_);
  std::vector<CachedRound> cached_rounds_ ABSL_GUARDED_BY(mu_);  // by cache id
  int counted_rounds_ ABSL_GUARDED_BY(mu_) = 0;                  // rounds with count > 0
};

}  // namespace kolo::daemon
