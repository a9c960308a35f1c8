#include "daemon/backend/nccl/collective_watchdog.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kolo::daemon::nccl {

CollectiveWatchdog::CollectiveWatchdog(NcclCommunicator* comm, const cuda::CudaDevice* device,
                                       absl::Duration interval)
    : comm_(comm), device_(device), interval_(interval), thread_([this] { Loop(); }) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void CollectiveWatchdog::Begin(std::string what, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  in_flight_ = true;
  what_ = std::move(what);
  deadline_ = deadline;
}

void CollectiveWatchdog::End() {
  absl::MutexLock lock(&mu_);
  in_flight_ = false;
}

absl::Status CollectiveWatchdog::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

void CollectiveWatchdog::Loop() {
  // NCCL's abort may touch the device; give this thread the right one.
  (void)device_->MakeCurrent();
  while (true) {
    bool past_deadline = false;
    std::string what;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), interval_);
      if (stop_) return;
      if (!failure_.ok()) continue;  // already aborted; nothing more to do
      past_deadline = in_flight_ && absl::Now() >= deadline_;
      what = what_;
    }
    absl::Status cause;
    if (past_deadline) {
      cause = absl::DeadlineExceededError(
          absl::StrCat(what, ": not finished by its deadline on NCCL rank ", comm_->rank(), " of ",
                       comm_->size(), " (a peer daemon stalled or died); communicator aborted"));
    } else if (!comm_->aborted()) {
      cause = comm_->AsyncError();
    } else {
      cause = comm_->abort_cause();
    }
    if (cause.ok()) continue;
    comm_->Abort(cause);
    absl::MutexLock lock(&mu_);
    failure_ = comm_->abort_cause();
  }
}

}  // namespace kolo::daemon::nccl
