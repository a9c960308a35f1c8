// Negotiator: the seam between a job's state and the order in which its
// collectives run. The job hands it every name that is locally ready (every
// rank of this node submitted it and they agree); the negotiator turns those
// names into an ordered stream of planned steps that the job's executor runs
// one at a time (see daemon/exec/executor.h).
//
// Two implementations:
//   - LocalNegotiator (one node): plans on the calling thread; a name ready
//     on this node is ready everywhere, so a small allreduce costs two
//     doorbells and a reduction, with no hand-off between threads.
//   - PeerNegotiator (many nodes): reports names to the job's coordinator
//     over the Peer service and runs the coordinator's plan, in plan order,
//     on its own thread.
// The job never asks which one it has.
//
// Thread-safety: implementations are thread-safe. LocallyReady is called
// with the job's lock held, so it must neither block nor call into the job.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/device_comm_plan.h"
#include "daemon/core/request.h"
#include "daemon/plan/fusion_planner.h"
#include "daemon/plan/fusion_tuner.h"

namespace kolo::daemon {

// One step of a job's plan, as this node runs it.
struct PlannedStep {
  enum class Kind {
    kCollective,        // data moves: `response` runs on a backend
    kProcessSetChange,  // an agreed add_process_set / remove_process_set
    kJoinDone,          // every rank of the job has joined
  };
  Kind kind = Kind::kCollective;
  // This node's tensors of the step, fused and laid out (for a control
  // step, the requests to complete). No members when this node's ranks all
  // joined and it takes part anyway (context.joined_here).
  Response response;
  // OK, or the verdict for every member (ranks or nodes disagreed, a removed
  // process set, no device communicator).
  absl::Status error;
  // Runs the response when its tensors are in host memory.
  Backend* host_backend = nullptr;
  StepContext context;
  // The job's device communicator, to make before running this response (the
  // first device response of the job carries it).
  std::optional<DeviceCommPlan> device_comm;
  // With device_comm: the global ranks this node hosts (ascending).
  std::vector<int> local_ranks;
  // Across nodes a failed device response ends the job (the other nodes
  // would wait in NCCL for this one until their deadline).
  bool device_failure_ends_job = false;
  // kProcessSetChange: the id an add_process_set got. kJoinDone: the last
  // rank to join.
  int new_process_set = 0;
  int last_joined = -1;
};

// Runs planned steps; the job's executor.
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // Runs `step` and completes its requests. Called by one thread at a time,
  // in plan order.
  virtual void Run(PlannedStep step) = 0;
  // Completes every request of `sets` with `status` (nothing ran).
  virtual void Fail(std::vector<ReadySet> sets, const absl::Status& status) = 0;
  // Ends the job on this node (every pending collective fails with `why`).
  virtual void AbortJob(const absl::Status& why) = 0;
};

// A name ready here and waiting for the other nodes (for stall reports).
struct WaitingName {
  std::string name;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  absl::Time first_submitted;
  // Where the negotiator knows them (a name in direct rounds): the ranks of
  // the nodes whose latest word lacked it. Empty: every rank elsewhere.
  std::vector<int> missing_ranks;
};

class Negotiator {
 public:
  virtual ~Negotiator() = default;
  // Every local rank (`local_ranks`, ascending) has attached: joins the
  // other nodes (blocking, up to the connect timeout). Names become ready
  // only after this succeeded.
  virtual absl::Status Start(std::vector<int> local_ranks) = 0;
  // A name every local rank submitted, in the order names became ready here
  // (the job's lock is held: must not block).
  virtual void LocallyReady(ReadySet set) = 0;
  // Plans and runs what is ready on the calling thread, unless another
  // thread is doing so. A peer negotiator's own thread runs its plan, so
  // there it returns at once. Called without the job's lock.
  virtual void Progress() = 0;
  // Whether `name` of `process_set` is ready here and not yet planned (the
  // same name again is then a duplicate in flight).
  virtual bool Waiting(int process_set, const std::string& name) = 0;
  virtual std::vector<WaitingName> WaitingNames() = 0;
  // The job ended here: stop, tell the others, fail what waits.
  virtual void Abort(const absl::Status& why) = 0;
  // Whether a join may run while the job has process sets (across nodes it
  // may not: a node whose ranks all joined cannot relay a set's data).
  virtual bool joins_with_process_sets() const = 0;
  // Whether other daemons negotiate this job too (it spans nodes): then a
  // node whose ranks all finished says so before it leaves.
  virtual bool has_peers() const = 0;
  // Whether a request may name the caller's memory by address (a job on one
  // node, whose daemon maps its ranks' memory; across nodes it may not).
  virtual bool takes_caller_memory() const = 0;
  // Negotiation messages this node took over the data plane (a job across
  // nodes, once its transport connects); none for a job on one node.
  virtual uint64_t data_plane_messages() const { return 0; }
  // The job's fusion tuner (daemon/plan/fusion_tuner.h): its samples from
  // index `since`. FAILED_PRECONDITION where the job does not autotune, or
  // plans elsewhere (a member node: the tuner runs on rank 0's kolod).
  virtual absl::StatusOr<plan::TunerReport> Autotune(uint32_t /*since*/) const {
    return absl::FailedPreconditionError(
        "the job does not autotune (every rank sets HOROVOD_AUTOTUNE=1 or KOLO_AUTOTUNE=1)");
  }
};

}  // namespace kolo::daemon
