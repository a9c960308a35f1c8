#include "daemon/backend/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "daemon/backend/nccl/cuda_status.h"
#include "daemon/backend/nccl/nccl_status.h"

namespace kolo::daemon::nccl {
namespace {

static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES);

// Backs off from a yield to 1 ms between polls of a non-blocking call.
class Backoff {
 public:
  void Wait() {
    if (polls_++ < 64) {
      std::this_thread::yield();
      return;
    }
    absl::SleepFor(delay_);
    if (delay_ < absl::Milliseconds(1)) delay_ *= 2;
  }

 private:
  int polls_ = 0;
  absl::Duration delay_ = absl::Microseconds(20);
};

}  // namespace

absl::StatusOr<NcclUniqueIdBytes> NewNcclUniqueId() {
  ncclUniqueId id;
  if (absl::Status s = NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"); !s.ok()) return s;
  NcclUniqueIdBytes bytes;
  std::memcpy(bytes.data(), id.internal, bytes.size());
  return bytes;
}

absl::StatusOr<ncclDataType_t> ToNcclType(DType dtype) {
  switch (dtype) {
    case DType::kUint8: return ncclUint8;
    case DType::kInt8: return ncclInt8;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no NCCL type for dtype ", static_cast<unsigned>(dtype)));
}

absl::StatusOr<ncclRedOp_t> ToNcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProduct: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAverage: break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no NCCL operator for ", ReduceOpName(op), " (fold 1/n into a postscale)"));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const NcclUniqueIdBytes& id, int nranks, int rank, int device, absl::Duration timeout) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL rank ", rank, " of ", nranks, " is not a rank"));
  }
  KOLO_RETURN_IF_CUDA_ERROR(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")"));
  ncclUniqueId uid;
  std::memcpy(uid.internal, id.data(), id.size());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "kolo";
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, uid, rank, &config);
  const std::string what = absl::StrCat("ncclCommInitRankConfig(rank ", rank, " of ", nranks,
                                        ", device ", device, ")");
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm != nullptr) ncclCommAbort(comm);
    return NcclStatus(r, what);
  }
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(comm, nranks, rank));
  absl::MutexLock lock(&c->mu_);
  if (absl::Status s = c->WaitReadyLocked(absl::Now() + timeout, what.c_str()); !s.ok()) {
    return s;  // WaitReadyLocked aborted it; the destructor frees nothing more
  }
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  absl::MutexLock lock(&mu_);
  if (comm_ == nullptr) return;
  // A clean finalize flushes outstanding work; on a non-blocking
  // communicator it returns at once and completes asynchronously.
  ncclResult_t r = ncclCommFinalize(comm_);
  if (r == ncclSuccess || r == ncclInProgress) {
    r = WaitReadyLocked(absl::Now() + absl::Seconds(5), "ncclCommFinalize").ok() ? ncclSuccess
                                                                                 : ncclInternalError;
  }
  if (comm_ == nullptr) return;  // the wait aborted it
  if (r == ncclSuccess) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

absl::Status NcclCommunicator::WaitReadyLocked(absl::Time deadline, const char* what) {
  Backoff backoff;
  while (true) {
    if (comm_ == nullptr) return abort_cause_;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) {
      absl::Status s = NcclStatus(r, absl::StrCat(what, ": ncclCommGetAsyncError"), comm_);
      AbortLocked(s);
      return s;
    }
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      absl::Status s = NcclStatus(state, what, comm_);
      AbortLocked(s);
      return s;
    }
    if (absl::Now() >= deadline) {
      absl::Status s = absl::DeadlineExceededError(
          absl::StrCat(what, ": NCCL rank ", rank_, " of ", nranks_,
                       " still in progress at its deadline; communicator aborted"));
      AbortLocked(s);
      return s;
    }
    // Other threads (the watchdog) may not take the lock meanwhile; the wait
    // is bounded by the deadline.
    backoff.Wait();
  }
}

absl::Status NcclCommunicator::AllReduce(const void* send, void* recv, size_t count,
                                         DType dtype, ReduceOp op, cudaStream_t stream,
                                         absl::Time deadline) {
  absl::StatusOr<ncclDataType_t> type = ToNcclType(dtype);
  if (!type.ok()) return type.status();
  absl::StatusOr<ncclRedOp_t> nccl_op = ToNcclOp(op);
  if (!nccl_op.ok()) return nccl_op.status();
  absl::MutexLock lock(&mu_);
  if (comm_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL communicator was aborted: ", abort_cause_.message()));
  }
  const std::string what = absl::StrCat("ncclAllReduce of ", count, " ", DTypeName(dtype),
                                        " (", ReduceOpName(op), ") on NCCL rank ", rank_, " of ",
                                        nranks_);
  const ncclResult_t r = ncclAllReduce(send, recv, count, *type, *nccl_op, comm_, stream);
  if (r == ncclInProgress) return WaitReadyLocked(deadline, what.c_str());
  if (r != ncclSuccess) {
    absl::Status s = NcclStatus(r, what, comm_);
    // A failed enqueue leaves the peers waiting for this rank: abort.
    AbortLocked(s);
    return s;
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::AsyncError() {
  absl::MutexLock lock(&mu_);
  if (comm_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL communicator was aborted: ", abort_cause_.message()));
  }
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) return NcclStatus(r, "ncclCommGetAsyncError", comm_);
  if (state == ncclSuccess || state == ncclInProgress) return absl::OkStatus();
  return NcclStatus(state, absl::StrCat("NCCL rank ", rank_, " of ", nranks_), comm_);
}

void NcclCommunicator::Abort(const absl::Status& cause) {
  absl::MutexLock lock(&mu_);
  AbortLocked(cause);
}

void NcclCommunicator::AbortLocked(const absl::Status& cause) {
  if (comm_ == nullptr) return;
  abort_cause_ = cause.ok() ? absl::AbortedError("NCCL communicator aborted") : cause;
  ncclCommAbort(comm_);
  comm_ = nullptr;
}

bool NcclCommunicator::aborted() const {
  absl::MutexLock lock(&mu_);
  return comm_ == nullptr;
}

absl::Status NcclCommunicator::abort_cause() const {
  absl::MutexLock lock(&mu_);
  return abort_cause_;
}

}  // namespace kolo::daemon::nccl
