#include "daemon/backend/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_status.h"
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
    case DType::kUint8:
      return ncclUint8;
    case DType::kInt8:
      return ncclInt8;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kBool:
      return ncclUint8;
    case DType::kInt16:
      return absl::UnimplementedError(
          "NCCL has no int16 type: an int16 allreduce of device tensors across GPUs is not "
          "supported (reduce them as int32, or as host tensors)");
    case DType::kUint16:
      return absl::UnimplementedError(
          "NCCL has no uint16 type: a uint16 allreduce of device tensors across GPUs is not "
          "supported (reduce them as int32, or as host tensors)");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no NCCL type for dtype ", static_cast<unsigned>(dtype)));
}

absl::StatusOr<ncclRedOp_t> ToNcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAverage:
    case ReduceOp::kAdasum:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no NCCL operator for ", ReduceOpName(op), " (fold 1/n into a postscale)"));
}

absl::StatusOr<ncclRedOp_t> ToNcclOp(DType dtype, ReduceOp op) {
  if (dtype != DType::kBool) return ToNcclOp(op);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMax:
      return ncclMax;  // or
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
      return ncclMin;  // and
    case ReduceOp::kAverage:
    case ReduceOp::kAdasum:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no NCCL operator for ", ReduceOpName(op), " of bool"));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const NcclUniqueIdBytes& id, int nranks, std::vector<NcclLaneRank> lanes,
    absl::Duration timeout, const std::atomic<bool>* cancel) {
  if (lanes.empty()) return absl::InvalidArgumentError("an NCCL communicator needs a GPU");
  for (size_t i = 0; i < lanes.size(); ++i) {
    if (nranks < 1 || lanes[i].rank < 0 || lanes[i].rank >= nranks) {
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL rank ", lanes[i].rank, " of ", nranks, " is not a rank"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (lanes[j].device == lanes[i].device || lanes[j].rank == lanes[i].rank) {
        return absl::InvalidArgumentError(
            absl::StrCat("NCCL ranks ", lanes[j].rank, " and ", lanes[i].rank, " on CUDA devices ",
                         lanes[j].device, " and ", lanes[i].device, ": one rank per GPU"));
      }
    }
  }
  int current = 0;
  KOLO_RETURN_IF_CUDA_ERROR(cudaGetDevice(&current), "cudaGetDevice");
  ncclUniqueId uid;
  std::memcpy(uid.internal, id.data(), id.size());
  std::vector<ncclComm_t> comms(lanes.size(), nullptr);
  std::string what = absl::StrCat("ncclCommInitRankConfig(", nranks, " ranks; here");
  for (const NcclLaneRank& l : lanes)
    absl::StrAppend(&what, " rank ", l.rank, " on device ", l.device);
  what += ")";
  // Several GPUs from one thread: one group, or the first init would wait
  // for the others forever.
  ncclResult_t r = ncclGroupStart();
  absl::Status failed;
  for (size_t i = 0; i < lanes.size() && r == ncclSuccess; ++i) {
    if (cudaSetDevice(lanes[i].device) != cudaSuccess) {
      failed = absl::FailedPreconditionError(
          absl::StrCat(what, ": cannot select CUDA device ", lanes[i].device));
      break;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = "kolo";
    r = ncclCommInitRankConfig(&comms[i], nranks, uid, lanes[i].rank, &config);
    if (r == ncclInProgress) r = ncclSuccess;
  }
  const ncclResult_t end = ncclGroupEnd();
  (void)cudaSetDevice(current);
  if (failed.ok() && r != ncclSuccess) failed = NcclStatus(r, what);
  if (failed.ok() && end != ncclSuccess && end != ncclInProgress) failed = NcclStatus(end, what);
  if (!failed.ok()) {
    for (ncclComm_t c : comms) {
      if (c != nullptr) ncclCommAbort(c);
    }
    return failed;
  }
  std::unique_ptr<NcclCommunicator> c(
      new NcclCommunicator(std::move(comms), nranks, std::move(lanes)));
  absl::MutexLock lock(&c->mu_);
  if (absl::Status s = c->WaitReadyLocked(absl::Now() + timeout, what, cancel); !s.ok()) {
    return s;  // WaitReadyLocked aborted it; the destructor frees nothing more
  }
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  absl::MutexLock lock(&mu_);
  if (comms_.empty()) return;
  // A clean finalize flushes outstanding work; on a non-blocking
  // communicator it returns at once and completes asynchronously.
  bool clean = true;
  for (ncclComm_t c : comms_) {
    const ncclResult_t r = ncclCommFinalize(c);
    clean = clean && (r == ncclSuccess || r == ncclInProgress);
  }
  if (clean) clean = WaitReadyLocked(absl::Now() + absl::Seconds(5), "ncclCommFinalize").ok();
  if (comms_.empty()) return;  // the wait aborted them
  for (ncclComm_t c : comms_) {
    if (clean) {
      ncclCommDestroy(c);
    } else {
      ncclCommAbort(c);
    }
  }
  comms_.clear();
}

std::string NcclCommunicator::DescribeLocked() const {
  std::string out = absl::StrCat("NCCL rank");
  if (lanes_.size() > 1) out += "s";
  for (size_t i = 0; i < lanes_.size(); ++i) absl::StrAppend(&out, i ? "," : " ", lanes_[i].rank);
  absl::StrAppend(&out, " of ", nranks_);
  return out;
}

absl::Status NcclCommunicator::WaitReadyLocked(absl::Time deadline, const std::string& what,
                                               const std::atomic<bool>* cancel) {
  Backoff backoff;
  while (true) {
    if (comms_.empty()) return abort_cause_;
    if (cancel != nullptr && cancel->load()) {
      absl::Status s = absl::CancelledError(
          absl::StrCat(what, ": the job ended while ", DescribeLocked(), " waited"));
      AbortLocked(s);
      return s;
    }
    bool in_progress = false;
    for (ncclComm_t c : comms_) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(c, &state);
      if (r != ncclSuccess) {
        absl::Status s = NcclStatus(r, absl::StrCat(what, ": ncclCommGetAsyncError"), c);
        AbortLocked(s);
        return s;
      }
      if (state == ncclInProgress) {
        in_progress = true;
      } else if (state != ncclSuccess) {
        absl::Status s = NcclStatus(state, what, c);
        AbortLocked(s);
        return s;
      }
    }
    if (!in_progress) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      absl::Status s = absl::DeadlineExceededError(
          absl::StrCat(what, ": ", DescribeLocked(),
                       " still in progress at its deadline; communicator aborted"));
      AbortLocked(s);
      return s;
    }
    // Between polls the lock is free, so Abort (the watchdog, or the job
    // ending on another thread) can end the wait at once; an abort empties
    // comms_, which the next round sees before touching a freed comm.
    mu_.Unlock();
    backoff.Wait();
    mu_.Lock();
  }
}

absl::Status NcclCommunicator::GroupLocked(
    const std::string& what, absl::Time deadline,
    const std::function<ncclResult_t(size_t lane)>& enqueue) {
  if (comms_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL communicator was aborted: ", abort_cause_.message()));
  }
  ncclResult_t r = ncclGroupStart();
  for (size_t i = 0; i < comms_.size() && (r == ncclSuccess || r == ncclInProgress); ++i) {
    r = enqueue(i);
  }
  const ncclResult_t end = ncclGroupEnd();
  if (r == ncclInProgress) r = ncclSuccess;
  if (r == ncclSuccess) r = end;
  if (r == ncclInProgress) return WaitReadyLocked(deadline, what);
  if (r != ncclSuccess) {
    absl::Status s = NcclStatus(r, what, comms_.front());
    // A failed enqueue leaves the peers waiting for this daemon: abort.
    AbortLocked(s);
    return s;
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::AllReduce(const std::vector<NcclLaneBuffers>& buffers, size_t count,
                                         DType dtype, ReduceOp op, absl::Time deadline) {
  absl::StatusOr<ncclDataType_t> type = ToNcclType(dtype);
  if (!type.ok()) return type.status();
  absl::StatusOr<ncclRedOp_t> nccl_op = ToNcclOp(dtype, op);
  if (!nccl_op.ok()) return nccl_op.status();
  if (buffers.size() != lanes_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("allreduce with ", buffers.size(), " buffers on ", lanes_.size(), " GPUs"));
  }
  absl::MutexLock lock(&mu_);
  const std::string what = absl::StrCat("ncclAllReduce of ", count, " ", DTypeName(dtype), " (",
                                        ReduceOpName(op), ") on ", DescribeLocked());
  return GroupLocked(what, deadline, [&](size_t i) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return ncclAllReduce(buffers[i].send, buffers[i].recv, count, *type, *nccl_op, comms_[i],
                         buffers[i].stream);
  });
}

absl::Status NcclCommunicator::Broadcast(const std::vector<NcclLaneBuffers>& buffers, size_t bytes,
                                         int root, absl::Time deadline) {
  if (buffers.size() != lanes_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast with ", buffers.size(), " buffers on ", lanes_.size(), " GPUs"));
  }
  if (root < 0 || root >= nranks_) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast root NCCL rank ", root, " of ", nranks_));
  }
  absl::MutexLock lock(&mu_);
  const std::string what = absl::StrCat("ncclBroadcast of ", bytes, " bytes from NCCL rank ", root,
                                        " on ", DescribeLocked());
  return GroupLocked(what, deadline, [&](size_t i) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return ncclBroadcast(buffers[i].send, buffers[i].recv, bytes, ncclUint8, root, comms_[i],
                         buffers[i].stream);
  });
}

absl::Status NcclCommunicator::AsyncError() {
  absl::MutexLock lock(&mu_);
  if (comms_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL communicator was aborted: ", abort_cause_.message()));
  }
  for (size_t i = 0; i < comms_.size(); ++i) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comms_[i], &state);
    if (r != ncclSuccess) return NcclStatus(r, "ncclCommGetAsyncError", comms_[i]);
    if (state == ncclSuccess || state == ncclInProgress) continue;
    return NcclStatus(state,
                      absl::StrCat("NCCL rank ", lanes_[i].rank, " of ", nranks_,
                                   " on CUDA device ", lanes_[i].device),
                      comms_[i]);
  }
  return absl::OkStatus();
}

void NcclCommunicator::Abort(const absl::Status& cause) {
  absl::MutexLock lock(&mu_);
  AbortLocked(cause);
}

void NcclCommunicator::AbortLocked(const absl::Status& cause) {
  if (comms_.empty()) return;
  abort_cause_ = cause.ok() ? absl::AbortedError("NCCL communicator aborted") : cause;
  // Every GPU's rank together: a job's failure ends all of them.
  for (ncclComm_t c : comms_) ncclCommAbort(c);
  comms_.clear();
}

bool NcclCommunicator::aborted() const {
  absl::MutexLock lock(&mu_);
  return comms_.empty();
}

absl::Status NcclCommunicator::abort_cause() const {
  absl::MutexLock lock(&mu_);
  return abort_cause_;
}

}  // namespace kolo::daemon::nccl
