// NcclBackend: allreduce, broadcast, allgather and reducescatter of device
// tensors. One instance per job and daemon: it holds this daemon's NCCL ranks
// of the job's communicator, one per GPU ("lane") the job's local ranks use (see
// daemon/backend/device_comm_plan.h), and reduces the contributions of the
// local ranks that share a GPU on that GPU before the NCCL step.
//
// Life of one fused allreduce response (everything on the lanes' streams,
// nothing waits on the host until step 8):
//   1. Resolve every request's DeviceTensorRefs on its rank's lane (IPC
//      mappings and events, cached per session) and check offsets, sizes
//      and that the tensor is on the rank's GPU.
//   2. Per lane: upload the pack and unpack descriptors (pinned staging ->
//      device).
//   3. cudaStreamWaitEvent on each input's event: the GPU, not kolod, waits
//      for the client's producer kernels.
//   4. Pack: one launch per lane copies each local rank's tensors into that
//      rank's region of the lane's fusion buffer, prescale fused in.
//   5. With several ranks on a lane, reduce their regions into region 0
//      (K-way kernel, f16/bf16 accumulating in f32).
//   6. With several NCCL ranks, one grouped ncclAllReduce in place on every
//      lane's region 0 (float32 with compression travels as
//      float16/bfloat16: narrow, reduce, widen).
//   7. Unpack: one launch per lane copies the result to its ranks' outputs,
//      postscale fused in (kAverage is a sum with postscale / set size);
//      then record each output's event for the client's stream to wait on.
//   8. Record each lane's completion event and poll them (cudaEventQuery
//      with backoff) on the executing thread while the watchdog thread
//      checks ncclCommGetAsyncError and the collective's deadline, aborting
//      the communicator on failure.
// Direct path: an allreduce of one tensor whose every lane has one rank (the
// usual one rank per GPU), without prescale, compression or a failed or
// joined member, skips the fusion buffer: steps 2, 4, 5 and 7 become one
// ncclAllReduce from the input to the output (one NCCL rank: a copy, none
// in place) and an in-place postscale.
// A reducescatter runs as an allreduce whose unpack gives each rank only its
// rows (common/scatter_rows.h) of each member, postscale fused in; an
// allgather as described at PrepareAllgather.
// A broadcast packs the root's tensors into its lane's region 0, runs one
// grouped ncclBroadcast from the root's NCCL rank into every lane, and
// unpacks on every lane (steps 1-4, 6-8).
//
// Why poll an event rather than cudaLaunchHostFunc: the daemon must learn of
// completion only to write completion slots, and it must also give up at a
// deadline when a peer hangs. A host function never runs if an NCCL kernel
// hangs (so a deadline loop is needed anyway), runs on a driver thread that
// may not call CUDA, and blocks the stream behind it while it runs. Polling
// keeps completion, deadline and abort in the executor's own loop; each poll
// is one cudaEventQuery (about a microsecond), first spinning with yields
// for the low-latency case, then sleeping with doubling backoff up to 0.5 ms.
//
// Failure: an error after step 1 but before the NCCL call is enqueued aborts
// the communicator (the peers would otherwise wait for this rank forever);
// after an abort every Execute fails with FAILED_PRECONDITION. A member
// whose tensors fail to resolve, or that a rank sent from a GPU other than
// its own, fails alone when every NCCL rank is this daemon's (its regions
// are zeroed and the collective still runs); when other daemons take part,
// the whole response fails and the communicator is aborted, since they
// cannot know to discard it. A rank keeps the GPU its first device tensor
// was on for the job's life.
//
// ============================ How kolod uses it ============================
// 1. Submission slot and Request: SubmitSlot (shm_abi_v1.h) carries a
//    DeviceTensorSlot per input and output and kSlotFlagDevice; ValidateSlot
//    checks them (flag, sizes == request bytes, ordinal, no arena offsets,
//    allreduce or broadcast) and fills Request::device.
// 2. Backend per response: CheckAgreement and the fusion planner's key
//    separate device from host tensors; Job picks its host backend or, for
//    Response::on_device, a DeviceBackend it makes on the first device
//    response through DeviceBackendFactory (daemon/backend/device_backend.h;
//    the CUDA factory wraps this class with an IpcTensorResolver). On one
//    node the job plans the communicator itself; across nodes the
//    coordinator does (every node's rank -> GPU pairs, one unique id) and the
//    plan rides on the first device response of the Peer plan, which every
//    daemon executes in the same order, so their NCCL initialisations meet.
// 3. Session teardown: Job::RankLeft releases the session's IPC mappings
//    after failing its pending requests; Job::Abort aborts the communicator.
// ==========================================================================
//
// Thread-safety: thread-safe; Execute calls are serialised (one job's
// responses run in order); the watchdog runs on its own thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cuda/cuda_resources.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/device_comm_plan.h"
#include "daemon/backend/nccl/collective_watchdog.h"
#include "daemon/backend/nccl/device_tensor_resolver.h"
#include "daemon/backend/nccl/nccl_communicator.h"
#include "kernels/cuda/batched_copy.h"

namespace kolo::daemon::nccl {

struct NcclBackendOptions {
  // The job's communicator (its unique_id an ncclUniqueId's bytes) and the
  // global ranks this daemon hosts: they make the lanes.
  DeviceCommPlan comm;
  std::vector<int> local_ranks;
  // Ends the wait to join the communicator when set (the job ended).
  const std::atomic<bool>* cancel = nullptr;
  absl::Duration init_timeout = absl::Seconds(120);
  // The deadline of one collective, from its enqueue to its completion.
  absl::Duration collective_timeout = absl::Seconds(300);
  absl::Duration watchdog_interval = absl::Milliseconds(10);
  // Each lane's fusion buffer's first size; it grows (between collectives)
  // when a response needs more and never shrinks.
  uint64_t initial_fusion_bytes = 64ull << 20;
};

class NcclBackend : public Backend {
 public:
  // Opens the lanes' devices, creates their streams, events and fusion
  // buffers, joins the communicator and starts the watchdog. `resolver` must
  // outlive the backend.
  static absl::StatusOr<std::unique_ptr<NcclBackend>> Create(const NcclBackendOptions& options,
                                                             DeviceTensorResolver* resolver);
  ~NcclBackend() override;

  absl::string_view name() const override { return "nccl"; }
  // Runs an allreduce or broadcast response over device tensors (other
  // collectives are UNIMPLEMENTED). Returns once the result is in every
  // output.
  absl::Status Execute(Response& response, const StepContext& step) override;
  // Aborts the communicator (from any thread): a collective in flight ends.
  void Abort(const absl::Status& why) { comm_->Abort(why); }

  NcclCommunicator& communicator() { return *comm_; }

 private:
  // One GPU: its ranks' regions in its fusion buffer, its stream and what
  // the response being executed moves there.
  struct Lane;
  // Where one local rank contributes: its lane and its region there.
  struct Slot {
    size_t lane = 0;
    size_t region = 0;
  };

  NcclBackend(NcclBackendOptions options, DeviceTensorResolver* resolver,
              std::vector<std::unique_ptr<Lane>> lanes, std::unique_ptr<NcclCommunicator> comm);

  // Steps 1 and 2-7 for either collective; an error in Enqueue aborts the
  // communicator. Prepare returns whether the collective runs (false: its
  // members failed alike on every daemon, as LayOutRegions decided).
  absl::StatusOr<bool> Prepare(Response& response, bool broadcast, std::vector<ResolvedIo>* holds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The steps of Prepare. LayOutRegions returns false when the response
  // cannot run anywhere (a broadcast root without a GPU, an allreduce
  // across GPUs of a dtype NCCL has no type for: its members failed).
  absl::StatusOr<bool> LayOutRegions(Response& response, bool broadcast)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PlaceMember(Response& response, size_t mi, bool broadcast,
                           std::vector<ResolvedIo>* holds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Enqueue(Response& response, bool broadcast, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the prepared response may take the direct path, and that path.
  bool CanRunDirect(const Response& response, bool broadcast) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EnqueueDirect(const Response& response, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Allgather (nccl_backend_gather.cc): one region per lane holds every
  // rank's rows in rank order; each lane packs its ranks' inputs at their
  // places (the region zeroed first when other lanes take part), one
  // ncclAllReduce over the region's bytes (a sum of disjoint parts: exact
  // for every dtype) fills in the rest, and each rank's output gets the
  // whole. It moves twice an allgather's bytes between GPUs; it keeps every
  // lane's NCCL call identical when ranks send different row counts.
  absl::StatusOr<bool> PrepareAllgather(Response& response, std::vector<ResolvedIo>* holds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank's position in the response's process set (the job's: the rank).
  int Position(int rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Step 8, up to `deadline` (then the watchdog aborts the communicator).
  absl::Status WaitForCompletion(const std::string& what, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const NcclBackendOptions options_;
  DeviceTensorResolver* const resolver_;
  absl::Mutex mu_;  // serialises Execute
  // Not shared between jobs on one GPU: two jobs whose daemons ran their
  // collectives in different orders would deadlock on a shared buffer.
  std::vector<std::unique_ptr<Lane>> lanes_ ABSL_GUARDED_BY(mu_);
  std::map<int, Slot> slots_;  // by global rank; fixed at creation
  // The response being executed (owned by whichever thread holds mu_).
  std::vector<uint64_t> offsets_ ABSL_GUARDED_BY(mu_);  // per member, in a region
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;             // elements (bytes for a broadcast)
  uint64_t region_ ABSL_GUARDED_BY(mu_) = 0;            // bytes per region
  ReduceOp op_ ABSL_GUARDED_BY(mu_) = ReduceOp::kSum;
  double postscale_ ABSL_GUARDED_BY(mu_) = 1.0;
  bool compress_ ABSL_GUARDED_BY(mu_) = false;
  int root_ ABSL_GUARDED_BY(mu_) = 0;  // NCCL rank of a broadcast's root
  const StepContext* step_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Thread-safe on their own:
  std::unique_ptr<NcclCommunicator> comm_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;  // after comm_: stops first
};

}  // namespace kolo::daemon::nccl
