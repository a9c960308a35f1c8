// Session: one attached client process — its shared-memory segment, the
// ingress thread that reads its submission ring, and the completions kolod
// writes back to it.
//
// Ingress copies each slot out of the ring, validates it and hands the
// Request to the session's job. The sessions of one job on this node share
// their polling (IngressGroup): after activity one thread of the job polls
// every ring of the job for the spin time, then each session's own thread
// sleeps on its submission doorbell, so an idle session costs no CPU. A
// corrupt ring or malformed slot fails the session (and so its job), never
// the daemon.
//
// Thread-safety: thread-safe. Complete() may be called from any thread;
// Start/Close from the owner (the Attach handler); Poll from the job's
// ingress threads (one at a time reads the ring).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/arena_allocator.h"
#include "common/shared_segment.h"
#include "common/spsc_ring.h"
#include "daemon/core/request.h"
#include "daemon/job/ingress_group.h"
#include "daemon/core/caller_memory.h"
#include "daemon/session/segment_check.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo::daemon {

struct SessionIdentity {
  std::string session_id;
  std::string job_id;
  int rank = 0;
  pid_t pid = 0;  // from the kernel (the handoff), never from a request
  uid_t uid = 0;
};

class Session final : public IngressMember,
                      public RequestOrigin,
                      public std::enable_shared_from_this<Session> {
 public:
  // Maps the client's segment (a descriptor it handed over, checked by
  // SharedSegment::Inspect) and checks its header against `limits`.
  static absl::StatusOr<std::shared_ptr<Session>> Open(SessionIdentity identity, UniqueFd shm_fd,
                                                       uint64_t shm_bytes,
                                                       const SessionLimits& limits);
  ~Session();

  // Starts ingress into `job`. `on_failure` is called once, from an ingress
  // thread of the job, if the client breaks the protocol.
  // RESOURCE_EXHAUSTED when the ingress thread cannot be made (the session
  // fails, not kolod).
  absl::Status Start(std::shared_ptr<RequestSink> job,
                     std::function<void(const absl::Status&)> on_failure);
  // Lets the session name host tensors by address in the client's process
  // (kSlotFlagCallerMemory), reached through `memory`. Before Start only.
  void EnableCallerMemory(std::shared_ptr<const CallerMemory> memory) {
    caller_memory_ = std::move(memory);
  }
  bool caller_memory() const { return caller_memory_ != nullptr; }

  // Stops ingress and tells the client the session is over. Idempotent.
  void Close();

  // RequestOrigin: what the job, the executor and the backends may do
  // with the session.
  const std::string& origin_id() const override { return identity_.session_id; }
  void Complete(absl::Span<const Completion> completions) override;
  absl::StatusOr<uint64_t> AllocateResult(uint64_t bytes) override;
  void ReleaseResult(uint64_t arena_offset) override;
  uint8_t* arena_base() const override { return arena_base_; }

  const SessionIdentity& identity() const { return identity_; }
  uint64_t submitted() const { return submitted_.load(std::memory_order_relaxed); }
  // Reads the submission ring, unless another thread is reading it.
  int Poll() override;
  bool HasPending() const override { return submit_ring_.HasData(); }
  uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }

 private:
  Session(SessionIdentity identity, SharedSegment segment, const SessionLimits& limits);
  void IngressLoop();
  // Polls every ring of the job until none had anything for the spin time.
  void Lead();
  // Reads the ring to its end; the caller holds polling_.
  int Drain();
  void Fail(const absl::Status& status);

  const SessionIdentity identity_;
  const SessionLimits limits_;
  SharedSegment segment_;
  abi::v1::SegmentHeader* header_;
  // Sizes copied from the header once, at Open, after validation.
  uint8_t* arena_base_ = nullptr;
  uint64_t arena_bytes_ = 0;
  SpscRing<abi::v1::SubmitSlot> submit_ring_;  // consumed by ingress only
  uint64_t result_begin_ = 0;                  // arena offset of the result area
  // Set before Start, then read-only.
  std::shared_ptr<const CallerMemory> caller_memory_;

  absl::Mutex result_mu_;
  std::unique_ptr<ArenaAllocator> results_ ABSL_GUARDED_BY(result_mu_);

  absl::Mutex completion_mu_;
  SpscRing<abi::v1::CompletionSlot> completion_ring_ ABSL_GUARDED_BY(completion_mu_);
  bool completion_broken_ ABSL_GUARDED_BY(completion_mu_) = false;

  std::shared_ptr<RequestSink> job_;
  // Set by Start: the job's ring-polling group (or own_group_ when the job
  // has none) and the job's size.
  IngressGroup* group_ = nullptr;
  std::unique_ptr<IngressGroup> own_group_;
  int job_size_ = 0;
  // Held by the thread reading the submission ring.
  std::atomic<bool> polling_{false};
  // Cleared by Close, so that completions arriving after the Attach handler
  // returned never call into it.
  absl::Mutex failure_mu_;
  std::function<void(const absl::Status&)> on_failure_ ABSL_GUARDED_BY(failure_mu_);
  std::atomic<bool> stop_{false};
  std::atomic<bool> closed_{false};
  std::thread ingress_;
  std::atomic<uint64_t> submitted_{0};
  std::atomic<uint64_t> completed_{0};
};

}  // namespace kolo::daemon
