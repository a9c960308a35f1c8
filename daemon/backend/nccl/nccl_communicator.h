// NcclCommunicator: one NCCL rank of a job's communicator (one rank per
// daemon), created non-blocking so that it can always be aborted.
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
#include <cstddef>
#include <memory>

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
absl::StatusOr<ncclDataType_t> ToNcclType(DType dtype);
absl::StatusOr<ncclRedOp_t> ToNcclOp(ReduceOp op);

class NcclCommunicator {
 public:
  // Joins the communicator `id` as `rank` of `nranks` on CUDA device
  // `device` (made current on the calling thread). Every rank must call
  // this; it fails with DEADLINE_EXCEEDED (and aborts) if the others do not
  // arrive within `timeout`.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(const NcclUniqueIdBytes& id,
                                                                  int nranks, int rank,
                                                                  int device,
                                                                  absl::Duration timeout);
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  // Finalizes and destroys a healthy communicator (aborting it if that does
  // not finish within a few seconds); frees an aborted one.
  ~NcclCommunicator();

  int rank() const { return rank_; }
  int size() const { return nranks_; }

  // Enqueues an allreduce of `count` elements on `stream` and waits (up to
  // `deadline`) until NCCL has accepted it. In place when send == recv.
  absl::Status AllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                         cudaStream_t stream, absl::Time deadline);

  // OK while healthy (including ncclInProgress); the asynchronous error
  // (a peer failed, the network broke) otherwise, or the abort cause.
  absl::Status AsyncError();

  // Aborts the communicator: NCCL kernels in flight exit and no further
  // call succeeds. Idempotent; the first cause is kept.
  void Abort(const absl::Status& cause);
  bool aborted() const;
  // The first abort's cause (OK if never aborted).
  absl::Status abort_cause() const;

 private:
  NcclCommunicator(ncclComm_t comm, int nranks, int rank)
      : comm_(comm), nranks_(nranks), rank_(rank) {}
  // Polls the communicator state until it leaves ncclInProgress or the
  // deadline passes (then aborts).
  absl::Status WaitReadyLocked(absl::Time deadline, const char* what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortLocked(const absl::Status& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_);  // null once aborted or destroyed
  absl::Status abort_cause_ ABSL_GUARDED_BY(mu_);
  const int nranks_;
  const int rank_;
};

}  // namespace kolo::daemon::nccl
