// FakeBackend: a Backend for tests that records what it was asked to run,
// returns a chosen status and, when armed, holds one execution until the
// test releases it, to stand in for a collective stuck in a backend. It never
// touches tensor data, so requests may carry null buffers.
//
// Thread-safety: thread-safe.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "daemon/backend/backend.h"

namespace kolo::daemon {

class FakeBackend : public Backend {
 public:
  absl::string_view name() const override { return "fake"; }

  absl::Status Execute(Response& response, const StepContext& /*step*/) override {
    bool block;
    absl::Status result;
    {
      absl::MutexLock l(&mu_);
      std::vector<std::string> names;
      for (const FusedMember& m : response.members) names.push_back(m.set.name);
      executed_.push_back(std::move(names));
      block = block_next_;
      block_next_ = false;
      result = result_;
    }
    if (block) {
      entered_.Notify();
      release_.WaitForNotification();
    }
    return result;
  }

  // The next Execute signals EnteredWithin and then waits for Release.
  void BlockNextExecution() {
    absl::MutexLock l(&mu_);
    block_next_ = true;
  }
  bool EnteredWithin(absl::Duration deadline) {
    return entered_.WaitForNotificationWithTimeout(deadline);
  }
  // Idempotent.
  void Release() {
    if (!released_.exchange(true)) release_.Notify();
  }

  void set_result(absl::Status status) {
    absl::MutexLock l(&mu_);
    result_ = std::move(status);
  }
  // The member names of each executed response, in order.
  std::vector<std::vector<std::string>> executed() const {
    absl::MutexLock l(&mu_);
    return executed_;
  }

 private:
  mutable absl::Mutex mu_;
  bool block_next_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::string>> executed_ ABSL_GUARDED_BY(mu_);
  absl::Notification entered_;
  absl::Notification release_;
  std::atomic<bool> released_{false};
};

}  // namespace kolo::daemon
