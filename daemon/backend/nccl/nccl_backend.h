// NcclBackend: allreduce of device tensors. One instance per job and GPU;
// it is one NCCL rank of the job's communicator (one rank per daemon) and
// reduces the contributions of the local ranks that share this daemon on the
// device before the inter-daemon step.
//
// Life of one fused allreduce response (everything on the backend's stream,
// nothing waits on the host until step 8):
//   1. Resolve every request's DeviceTensorRefs (IPC mappings and events,
//      cached per session) and check offsets and sizes.
//   2. Upload the pack and unpack descriptors (pinned staging -> device).
//   3. cudaStreamWaitEvent on each input's event: the GPU, not kolod, waits
//      for the client's producer kernels.
//   4. Pack: one launch copies every local rank's tensors into its region of
//      the fusion buffer, prescale fused in.
//   5. With several local ranks, reduce their regions into region 0 (K-way
//      kernel, f16/bf16 accumulating in f32).
//   6. With several daemons, ncclAllReduce in place on region 0 (float32 with
//      compression travels as float16/bfloat16: narrow, reduce, widen).
//   7. Unpack: one launch copies the result to every rank's output,
//      postscale fused in (kAverage is a sum with postscale / set size); then
//      record each output's event for the client's stream to wait on.
//   8. Record a completion event and poll it (cudaEventQuery with backoff)
//      on the executing thread while the watchdog thread checks
//      ncclCommGetAsyncError and the collective's deadline, aborting the
//      communicator on failure.
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
// after an abort every Execute fails with FAILED_PRECONDITION until the job
// builds a new backend with a new unique id. A member whose tensors fail to
// resolve fails alone: its region is zeroed and the collective still runs,
// so the peers are not left waiting (see integration point 4).
//
// ============================ How kolod uses it ============================
// 1. Submission slot and Request: SubmitSlot (shm_abi_v1.h) carries a
//    DeviceTensorSlot per input and output and kSlotFlagDevice; ValidateSlot
//    checks them (flag, sizes == request bytes, ordinal, no arena offsets,
//    allreduce only) and fills Request::device.
// 2. Backend per response: CheckAgreement and the fusion planner's key
//    separate device from host tensors (and GPUs from each other); Job picks
//    its host backend or, for Response::device >= 0, a DeviceBackend it
//    makes on the first device response through DeviceBackendFactory
//    (daemon/backend/device_backend.h; the CUDA factory wraps this class
//    with an IpcTensorResolver and a one-rank communicator, the other one
//    answers UNIMPLEMENTED). A failure to make it fails the device requests
//    only, with its error.
// 3. Session teardown: Job::RankLeft releases the session's IPC mappings
//    after failing its pending requests.
// Not yet: multi-node jobs refuse device tensors (UNIMPLEMENTED in
// Job::AdmitLocked). They need the coordinator to make the unique id
// (NewNcclUniqueId) when the first device request is globally ready, send it
// with the daemons' ranks in the Peer protocol (join reply or a dedicated
// message), and every daemon to call NcclBackend::Create concurrently on a
// job worker thread with nranks = daemons, rank = its index. Nor resolving
// device tensors at ingress (IpcTensorResolver::Resolve is safe there),
// which would fail a bad handle before negotiation.
// ==========================================================================
//
// Thread-safety: thread-safe; Execute calls are serialised (one job's
// responses run in order); the watchdog runs on its own thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/nccl/collective_watchdog.h"
#include "daemon/backend/nccl/cuda_resources.h"
#include "daemon/backend/nccl/device_tensor_resolver.h"
#include "daemon/backend/nccl/nccl_communicator.h"
#include "kernels/cuda/batched_copy.h"

namespace kolo::daemon::nccl {

struct NcclBackendOptions {
  int device = 0;  // CUDA ordinal this daemon drives for the job
  int nranks = 1;  // daemons in the job
  int rank = 0;    // this daemon's NCCL rank
  NcclUniqueIdBytes unique_id{};
  absl::Duration init_timeout = absl::Seconds(120);
  // The deadline of one collective, from its enqueue to its completion.
  absl::Duration collective_timeout = absl::Seconds(300);
  absl::Duration watchdog_interval = absl::Milliseconds(10);
  // The fusion buffer's first size; it grows (between collectives) when a
  // response needs more and never shrinks.
  uint64_t initial_fusion_bytes = 64ull << 20;
};

class NcclBackend : public Backend {
 public:
  // Opens the device, creates the stream, events and fusion buffer, joins
  // the communicator and starts the watchdog. `resolver` must outlive the
  // backend.
  static absl::StatusOr<std::unique_ptr<NcclBackend>> Create(const NcclBackendOptions& options,
                                                             DeviceTensorResolver* resolver);
  ~NcclBackend() override;

  absl::string_view name() const override { return "nccl"; }
  // Runs an allreduce response over device tensors (other collectives are
  // UNIMPLEMENTED for now). Returns once the result is in every output.
  absl::Status Execute(Response& response) override;

  NcclCommunicator& communicator() { return *comm_; }

 private:
  NcclBackend(NcclBackendOptions options, DeviceTensorResolver* resolver, CudaDevice device,
              CudaStream stream, CudaEvent done, std::unique_ptr<NcclCommunicator> comm);

  absl::Status ExecuteAllreduce(Response& response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Steps 2-7; an error here aborts the communicator.
  absl::Status Enqueue(Response& response, uint64_t count, uint64_t region_bytes,
                       size_t local_ranks, ReduceOp op, double postscale, bool compress,
                       const std::vector<cudaEvent_t>& wait_events,
                       const std::vector<cudaEvent_t>& record_events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Step 8.
  absl::Status WaitForCompletion(const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const NcclBackendOptions options_;
  DeviceTensorResolver* const resolver_;
  const CudaDevice device_;
  absl::Mutex mu_;  // serialises Execute
  // Owned by whichever thread holds mu_:
  CudaStream stream_ ABSL_GUARDED_BY(mu_);
  CudaEvent done_ ABSL_GUARDED_BY(mu_);
  // Not shared between jobs on one GPU: two jobs whose daemons ran their
  // collectives in different orders would deadlock on a shared buffer.
  DeviceBuffer fusion_ ABSL_GUARDED_BY(mu_);
  DeviceBuffer descriptors_ ABSL_GUARDED_BY(mu_);
  PinnedBuffer staging_ ABSL_GUARDED_BY(mu_);
  std::vector<kernels::cuda::CopySegment> pack_ ABSL_GUARDED_BY(mu_);
  std::vector<kernels::cuda::CopySegment> unpack_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> offsets_ ABSL_GUARDED_BY(mu_);  // per member, in the fusion buffer
  std::vector<uint8_t*> pack_dst_of_failed_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> failed_bytes_ ABSL_GUARDED_BY(mu_);
  // Thread-safe on their own:
  std::unique_ptr<NcclCommunicator> comm_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;  // after comm_: stops first
};

}  // namespace kolo::daemon::nccl
