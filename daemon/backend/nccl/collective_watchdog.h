// CollectiveWatchdog: the thread that notices a stuck or failed NCCL
// communicator and aborts it, so that no executor thread waits forever.
//
// Every `interval` it asks NCCL for the communicator's asynchronous error
// (a peer died, the network broke) and, while a collective is in flight,
// compares the clock with that collective's deadline. On either failure it
// aborts the communicator (NCCL kernels in flight then exit) and records the
// cause, which the executor, polling its completion event, picks up.
//
// Thread-safety: thread-safe. Begin/End are called by the executing thread.
#pragma once

#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cuda/cuda_resources.h"
#include "daemon/backend/nccl/nccl_communicator.h"

namespace kolo::daemon::nccl {

class CollectiveWatchdog {
 public:
  // `comm` and `device` must outlive the watchdog. Starts the thread.
  CollectiveWatchdog(NcclCommunicator* comm, const cuda::CudaDevice* device,
                     absl::Duration interval);
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;
  // Stops and joins the thread.
  ~CollectiveWatchdog();

  // A collective described by `what` is in flight until End(); if it still
  // is at `deadline`, the communicator is aborted with DEADLINE_EXCEEDED.
  void Begin(std::string what, absl::Time deadline);
  void End();
  // Why the watchdog aborted the communicator; OK if it has not.
  absl::Status failure() const;

 private:
  void Loop();

  NcclCommunicator* const comm_;
  const cuda::CudaDevice* const device_;
  const absl::Duration interval_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  std::string what_ ABSL_GUARDED_BY(mu_);
  absl::Time deadline_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once the fields above exist
};

}  // namespace kolo::daemon::nccl
