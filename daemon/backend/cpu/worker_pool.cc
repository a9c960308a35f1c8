#include "daemon/backend/cpu/worker_pool.h"

#include <utility>

#include "common/start_thread.h"

namespace kolo::daemon {

WorkerPool::WorkerPool(int threads) {
  for (int i = 0; i < threads; ++i) {
    absl::StatusOr<std::thread> t = StartThread("a CPU worker", "kolo-worker", [this] { Loop(); });
    if (!t.ok()) {
      // The pool runs with the helpers it has (none: all on the caller).
      start_error_ = t.status();
      break;
    }
    threads_.push_back(std::move(*t));
  }
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  for (auto& t : threads_) t.join();
}

void WorkerPool::Drain() {
  while (batch_.next < batch_.n) {
    size_t i = batch_.next++;
    const auto* fn = batch_.fn;
    mu_.Unlock();
    (*fn)(i);
    mu_.Lock();
    ++batch_.done;
  }
}

void WorkerPool::Loop() {
  absl::MutexLock l(&mu_);
  // The generation when the pool was built, not when this thread got here: a
  // ParallelFor may already have started a batch, which this helper must join.
  uint64_t seen = 0;
  for (;;) {
    auto woken = [this, &seen]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || generation_ != seen; };
    mu_.Await(absl::Condition(&woken));
    if (stop_) return;
    seen = generation_;
    Drain();
  }
}

void WorkerPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (threads_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  absl::MutexLock call(&call_mu_);
  absl::MutexLock l(&mu_);
  batch_ = Batch{&fn, n, 0, 0};
  ++generation_;
  Drain();
  auto finished = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return batch_.done == batch_.n; };
  mu_.Await(absl::Condition(&finished));
  batch_ = Batch{};
}

}  // namespace kolo::daemon
