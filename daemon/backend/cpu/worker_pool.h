// WorkerPool: a fixed set of threads that run the chunks of one data-parallel
// step (a large reduction) alongside the calling thread, and sleep otherwise.
//
// Thread-safety: ParallelFor may be called from several threads; calls are
// served one at a time.
#pragma once

#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace kolo::daemon {

class WorkerPool {
 public:
  // `threads` helpers besides the caller; 0 runs everything on the caller.
  // Should the system refuse a helper thread, the pool runs with those it
  // started (threads() says how many; start_error() why not more).
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs fn(0) .. fn(n-1), each once, on the caller and the helpers; returns
  // when all are done.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

  int threads() const { return static_cast<int>(threads_.size()); }
  const absl::Status& start_error() const { return start_error_; }

 private:
  struct Batch {
    const std::function<void(size_t)>* fn = nullptr;
    size_t n = 0;
    size_t next = 0;
    size_t done = 0;
  };
  void Loop();
  // Claims and runs items of the current batch until none are left.
  void Drain() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex call_mu_;  // one ParallelFor at a time
  absl::Mutex mu_;
  Batch batch_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
  absl::Status start_error_;  // why a helper did not start
};

}  // namespace kolo::daemon
