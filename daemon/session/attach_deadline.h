// AttachDeadlines: cancels an Attach call whose client has not sent its
// AttachRequest in time, so an idle stream holds a gRPC thread for a bounded
// time only. One thread serves every armed call.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace grpc {
class ServerContext;
}

namespace kolo::daemon {

class AttachDeadlines {
 public:
  AttachDeadlines();
  ~AttachDeadlines();
  AttachDeadlines(const AttachDeadlines&) = delete;
  AttachDeadlines& operator=(const AttachDeadlines&) = delete;

  // Cancels `context` at `deadline` unless the returned guard was destroyed
  // (or Disarm'ed) first.
  class Armed {
   public:
    Armed(AttachDeadlines* owner, uint64_t id) : owner_(owner), id_(id) {}
    Armed(const Armed&) = delete;
    Armed& operator=(const Armed&) = delete;
    ~Armed() { Disarm(); }
    void Disarm();

   private:
    AttachDeadlines* owner_;
    uint64_t id_;
  };
  Armed Arm(grpc::ServerContext* context, absl::Time deadline);

 private:
  void Loop();

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  struct Watch {
    absl::Time deadline;
    grpc::ServerContext* context;
  };
  std::map<uint64_t, Watch> armed_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kolo::daemon
