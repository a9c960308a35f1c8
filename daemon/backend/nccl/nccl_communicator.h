// NcclCommunicator: this daemon's NCCL ranks of a job's communicator, one per
// GPU it drives for the job (see daemon/backend/device_comm_plan.h), created
// non-blocking so that they can always be aborted, and always driven
// together: one NCCL group call per collective, one abort for all.
//
// With `blocking = 0` NCCL calls return at once, possibly with ncclInProgress;
// the communicator is usable only once ncclCommGetAsyncError reports
// ncclSuccess. Every call here therefore polls that state up to a deadline,
// and a call that misses its deadline aborts the communicator rather than
// leave kolod blocked inside NCCL on a peer that will never answer.
//
// Abort() may come from the watchdog thread while the executor uses the
// communicator; one mutex serialises every NCCL call on it, and after an
// abort every call fails with FAILED_PRECONDITION carrying the cause.
//
// Not movable (it holds its mutex); owned through unique_ptr.
//
// Thread-safety: thread-safe.
#pragma once

#include <nccl.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon::nccl {

// The bytes of an ncclUniqueId: made by one daemon of the job (the
// coordinator's) and passed to every other one over the peer protocol.
using NcclUniqueIdBytes = std::array<char, NCCL_UNIQUE_ID_BYTES>;

absl::StatusOr<NcclUniqueIdBytes> NewNcclUniqueId();

// The NCCL type and operator for Kolo's; kAverage has no NCCL equivalent
// here (callers fold 1/n into a postscale), nor do out-of-range values.
// NCCL has no 16-bit integer type: int16 and uint16 are UNIMPLEMENTED
// (broadcasts move bytes and need no type). bool travels as ncclUint8 and
// reduces with the dtype-aware ToNcclOp: sum and max as ncclMax (or),
// product and min as ncclMin (and).
absl::StatusOr<ncclDataType_t> ToNcclType(DType dtype);
absl::StatusOr<ncclRedOp_t> ToNcclOp(ReduceOp op);
absl::StatusOr<ncclRedOp_t> ToNcclOp(DType dtype, ReduceOp op);

// One GPU this daemon drives for the communicator: its NCCL rank and CUDA
// ordinal.
struct NcclLaneRank {
  int rank = 0;
  int device = 0;
};

// Per GPU (in lane order): the buffers and the stream of one collective.
struct NcclLaneBuffers {
  const void* send = nullptr;
  void* recv = nullptr;
  cudaStream_t stream = nullptr;
};

class NcclCommunicator {
 public:
  // Joins the communicator `id` of `nranks` with one NCCL rank per entry of
  // `lanes` (distinct GPUs), all in one NCCL group so that one thread can
  // initialise several GPUs. Every rank must call this; it fails with
  // DEADLINE_EXCEEDED (and aborts) if the others do not arrive within
  // `timeout`, and with CANCELLED as soon as `*cancel` (if given) is set.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      const NcclUniqueIdBytes& id, int nranks, std::vector<NcclLaneRank> lanes,
      absl::Duration timeout, const std::atomic<bool>* cancel = nullptr);
  // One NCCL rank on one GPU.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(const NcclUniqueIdBytes& id,
                                                                  int nranks, int rank, int device,
                                                                  absl::Duration timeout) {
    return Create(id, nranks, {NcclLaneRank{rank, device}}, timeout);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  // Finalizes and destroys a healthy communicator (aborting it if that does
  // not finish within a few seconds); frees an aborted one.
  ~NcclCommunicator();

  // This daemon's first NCCL rank, and the communicator's size.
  int rank() const { return lanes_.front().rank; }
  int size() const { return nranks_; }
  const std::vector<NcclLaneRank>& lanes() const { return lanes_; }

  // Enqueues an allreduce of `count` elements on every lane (buffers[i] on
  // lane i's GPU and stream; in place when send == recv) and waits (up to
  // `deadline`) until NCCL has accepted it. A dtype or op NCCL cannot reduce
  // (see ToNcclType) fails before any NCCL call. bool buffers should hold
  // bytes of 0 or 1: the result's truth values are right either way, but
  // only then are its bytes 0 or 1.
  absl::Status AllReduce(const std::vector<NcclLaneBuffers>& buffers, size_t count, DType dtype,
                         ReduceOp op, absl::Time deadline);
  // One lane.
  absl::Status AllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                         cudaStream_t stream, absl::Time deadline) {
    return AllReduce({NcclLaneBuffers{send, recv, stream}}, count, dtype, op, deadline);
  }
  // Enqueues a broadcast of `bytes` from NCCL rank `root` into every lane's
  // recv buffer (the root lane reads its send buffer), as AllReduce.
  absl::Status Broadcast(const std::vector<NcclLaneBuffers>& buffers, size_t bytes, int root,
                         absl::Time deadline);

  // OK while healthy (including ncclInProgress); the asynchronous error
  // of the first lane that has one (a peer failed, the network broke), or
  // the abort cause.
  absl::Status AsyncError();

  // Aborts every lane's communicator: NCCL kernels in flight exit and no
  // further call succeeds. Idempotent; the first cause is kept.
  void Abort(const absl::Status& cause);
  bool aborted() const;
  // The first abort's cause (OK if never aborted).
  absl::Status abort_cause() const;

 private:
  NcclCommunicator(std::vector<ncclComm_t> comms, int nranks, std::vector<NcclLaneRank> lanes)
      : comms_(std::move(comms)), nranks_(nranks), lanes_(std::move(lanes)) {}
  // Polls every lane until none is in progress or the deadline passes
  // (then aborts). Releases mu_ between polls: an Abort meanwhile ends the
  // wait with its cause.
  absl::Status WaitReadyLocked(absl::Time deadline, const std::string& what,
                               const std::atomic<bool>* cancel = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `enqueue(lane)` for every lane inside one NCCL group.
  absl::Status GroupLocked(const std::string& what, absl::Time deadline,
                           const std::function<ncclResult_t(size_t lane)>& enqueue)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortLocked(const absl::Status& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DescribeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<ncclComm_t> comms_ ABSL_GUARDED_BY(mu_);  // by lane; empty once aborted/destroyed
  absl::Status abort_cause_ ABSL_GUARDED_BY(mu_);
  const int nranks_;
  const std::vector<NcclLaneRank> lanes_;
};

}  // namespace kolo::daemon::nccl
