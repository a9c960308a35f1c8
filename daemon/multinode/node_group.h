// NodeGroup: the part of a job that spans several nodes. The job hands it
// every name that is locally ready (all of this node's ranks submitted it);
// the group reports it to the coordinator, waits for the plan, and executes
// the planned responses in order: reduce the local ranks' tensors into a
// fusion buffer, allreduce or broadcast that buffer among the nodes over the
// transport, and deliver the result to every local rank.
//
// Every collective spans nodes (allreduce, broadcast, allgather,
// reducescatter, alltoall, barrier, join); those of a process set run among
// the nodes of its ranks (a node hosting none skips the response in step). A
// node whose ranks all joined takes part in allreduces with zeros and in
// broadcasts as a relay, laid out from the plan's metadata. Responses of device tensors go
// back to the job (NodeGroupOptions::run_device), which runs them on its
// NCCL backend in the same plan order on every node.
//
// Thread-safety: thread-safe. The link's threads call the listener methods;
// a dedicated executor thread runs the plan, so the link keeps reading
// heartbeats while data moves.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/negotiation/member_link.h"
#include "daemon/negotiation/peer_service.h"
#include "daemon/request_table.h"
#include "daemon/transport/subset_transport.h"
#include "daemon/transport/transport.h"

namespace kolo::daemon {

struct NodeGroupOptions {
  std::string job_id;
  std::string job_token;
  int size = 0;                 // ranks in the job
  std::vector<int> local_ranks; // hosted here, ascending
  std::string node_name;
  // Where the coordinator is: in this daemon (it hosts rank 0) or remote.
  bool local_coordinator = false;
  CoordinatorRegistry* coordinators = nullptr;  // for a local coordinator
  std::string coordinator_address;              // for a remote one
  absl::Duration peer_timeout = absl::Seconds(10);
  absl::Duration connect_timeout = absl::Seconds(10);
  // Ends the job on this node (every pending collective fails with it).
  std::function<void(const absl::Status&)> abort_job;
  // Called after each planned host response ran (or failed), once its
  // requests are completed: for metrics, the flight recorder and the
  // timeline.
  std::function<void(const std::vector<ReadySet>& sets, const absl::Status& status,
                     absl::Time start, absl::Time end)>
      on_executed;
  // Runs a planned response of device tensors (over the job's NCCL
  // communicator, joined first when `comm` is set) and completes every
  // request of `sets`. Called on the group's executor thread, in plan order.
  std::function<void(std::vector<ReadySet> sets, const DeviceCommPlan* comm)> run_device;
  // Applies an add_process_set (its id `new_set`, from the plan) or a
  // remove_process_set every node agreed on, and completes its requests.
  // Called on the group's executor thread, in plan order.
  std::function<void(std::vector<ReadySet> sets, int new_set)> change_set;
  // Every rank has joined: completes the join requests of `sets` with the
  // last rank to join and resets the job's joined state.
  std::function<void(std::vector<ReadySet> sets, int last_joined)> join_done;
};

class NodeGroup : public LinkListener {
 public:
  // Creates the transport, connects to the coordinator and says Hello.
  static absl::StatusOr<std::unique_ptr<NodeGroup>> Start(NodeGroupOptions options);
  ~NodeGroup() override;

  // A name every local rank has submitted (its agreement already checked
  // among them).
  void LocallyReady(ReadySet set);
  // The job ended here: tell the others and stop moving data.
  void Abort(const absl::Status& why);

  // Names ready on this node and waiting for the other nodes (for stall
  // reports): name, collective, and when its first local rank submitted it.
  struct Parked {
    std::string name;
    CollectiveKind kind;
    absl::Time first_submitted;
  };
  std::vector<Parked> ParkedNames();
  // Whether `name` of `process_set` is ready here and still waiting for the
  // other nodes.
  bool IsParked(int process_set, const std::string& name);

  void OnWelcome(const kolo::v1::Welcome& welcome) override;
  void OnPlan(std::vector<PlannedEntry> plan) override;
  void OnLinkAbort(const std::string& reason) override;

 private:
  explicit NodeGroup(NodeGroupOptions options);
  void ExecuteLoop();
  // Aborts the transport once the job has ended here, but only after the
  // response being executed has had a moment to finish: when another node
  // ends the job because its ranks finished, this node may still be
  // receiving that node's last bytes of the same (complete-able) response.
  void AbortTransportLoop();
  void Execute(PlannedEntry entry);
  // Lays the tensors of `sets` out in the fusion buffer (offsets per set)
  // and reduces the local ranks' contributions there; returns the bytes used.
  absl::StatusOr<uint64_t> ReduceLocalRanks(const std::vector<ReadySet>& sets,
                                            std::vector<uint64_t>* offsets);
  // Allreduces the first `total` bytes of the fusion buffer among the nodes
  // (compressed on the wire when `first` asks for it).
  absl::Status AllreduceFusionBuffer(const Request& first, uint64_t total, uint64_t tag_base);
  // This node's ranks have all joined: takes part in `entry` with zeros
  // (allreduce) or as a relay (broadcast), laid out from its metas.
  absl::Status RunAsJoined(const PlannedEntry& entry, uint64_t tag_base);
  // Both of the above, with the postscale the results get (average
  // divides by the set's size); returns the bytes used.
  absl::StatusOr<uint64_t> ReduceAmongNodes(const std::vector<ReadySet>& sets, uint64_t tag_base,
                                            std::vector<uint64_t>* offsets, double* postscale);
  absl::Status RunAllreduce(std::vector<ReadySet>& sets, uint64_t tag_base);
  absl::Status RunBroadcast(std::vector<ReadySet>& sets, uint64_t tag_base);
  // `rows`: every rank's first dimension (from the plan). On success `done`
  // holds each request's completion with its result in its session.
  absl::Status RunAllgather(std::vector<ReadySet>& sets, const std::vector<int64_t>& rows,
                            uint64_t tag_base, std::vector<Completion>* done);
  // `splits`: the plan's size x size matrix; results as RunAllgather's.
  absl::Status RunAlltoall(std::vector<ReadySet>& sets, const std::vector<int64_t>& splits,
                           uint64_t tag_base, std::vector<Completion>* done);
  // As RunAllgather's `done`: each local rank's rows of the reduced tensors.
  absl::Status RunReducescatter(std::vector<ReadySet>& sets, uint64_t tag_base,
                                std::vector<Completion>* done);
  void Complete(std::vector<ReadySet>& sets, const absl::Status& status);

  const NodeGroupOptions options_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<MemberLink> link_;

  absl::Mutex mu_;
  bool welcomed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  bool executing_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int> rank_node_ ABSL_GUARDED_BY(mu_);  // node index per rank
  absl::flat_hash_map<std::string, ReadySet> parked_ ABSL_GUARDED_BY(mu_);
  std::deque<PlannedEntry> plan_ ABSL_GUARDED_BY(mu_);

  uint64_t sequence_ = 0;              // executor thread only
  // Executor thread only: the process sets (by id, as the plan numbered
  // them) and, for the response being executed, the transport among the
  // nodes of its set, the nodes' base indices and the set's size.
  std::map<int, std::vector<int>> sets_;
  std::unique_ptr<SubsetTransport> subset_;
  Transport* active_ = nullptr;
  std::vector<int> active_nodes_;
  std::vector<int> node_of_;    // node index by global rank (from the welcome)
  std::vector<int> all_ranks_;  // 0 .. size-1
  std::vector<int> subset_node_of_;
  const std::vector<int>* active_members_ = nullptr;  // the set's ranks, ascending
  // By global rank: node index in active_, or -1.
  const std::vector<int>* active_node_of_ = nullptr;
  int set_size_ = 0;
  std::vector<uint8_t> fusion_buffer_;  // executor thread only
  std::vector<uint16_t> wire_buffer_;   // executor thread only: compressed data
  std::thread executor_;
  std::thread transport_aborter_;
};

}  // namespace kolo::daemon
