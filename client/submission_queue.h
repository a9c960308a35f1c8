// SubmissionQueue: the session's shared-memory segment as the client uses
// it — the submission ring and kolod's doorbell, the arena (caller buffers
// and staging copies), the table of requests in flight, the completion ring
// and the completions until a Wait takes them.
//
// Thread-safety: thread-safe. submit_mu_ serialises the producers of the
// submission ring; completion_mu_ guards the completion ring's consumer
// side and the request tables. Lock order: completion_mu_ before the part
// sender's lock (PartHooks, called with completion_mu_ held) and before the
// arena's mu; submit_mu_ is never held while taking another lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/device_tensor_io.h"
#include "client/naming.h"
#include "client/session.h"
#include "client/session_arena.h"
#include "client/submit_spec.h"
#include "common/shared_segment.h"
#include "common/spsc_ring.h"
#include "kolo/kolo.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo {

// What the queue tells the part sender of the requests that are parts of
// a larger tensor (a "whole"), and asks of it while a thread waits. The
// first four are called with the queue's completion_mu_ held.
class PartHooks {
 public:
  virtual ~PartHooks() = default;
  // A part of `whole` (its first, if `first`) completed with `status`.
  // Returns the whole's status once every part of it has completed.
  virtual std::optional<absl::Status> PartCompleted(uint64_t whole, bool first,
                                                    const absl::Status& status) = 0;
  // After a drain in which parts completed.
  virtual void PartsProgressed() = 0;
  // A Wait gave `whole` up (the session died with it in flight).
  virtual void Abandoned(uint64_t whole) = 0;
  // Whether the first part of `whole` completed (every rank submitted it).
  virtual bool FirstDone(uint64_t whole) const = 0;
  // A thread waits on or tests a handle, between these two calls, and
  // sends parts itself meanwhile (SendParts; no lock held).
  virtual void BeginWait() = 0;
  virtual void EndWait() = 0;
  virtual void SendParts() = 0;
};

class SubmissionQueue {
 public:
  // Sleepers re-check the session's liveness at least this often.
  static constexpr absl::Duration kMaxSleep = absl::Milliseconds(100);

  // `session` tells liveness and the options; `parts` hears of parts.
  SubmissionQueue(const Session* session, PartHooks* parts) : session_(session), parts_(parts) {}
  ~SubmissionQueue() { DetachArena(); }
  SubmissionQueue(const SubmissionQueue&) = delete;
  SubmissionQueue& operator=(const SubmissionQueue&) = delete;

  // Creates and lays out the segment (once, before the attach).
  absl::Status MapSegment(const ClientOptions& options);
  const SharedSegment& segment() const { return *segment_; }
  abi::v1::SegmentHeader* header() const { return header_; }
  // HostBuffers that outlive the client stop handing results back.
  void DetachArena();

  absl::StatusOr<HostBuffer> Allocate(DType dtype, std::vector<int64_t> shape);
  // Whether `bytes` at `p` lie in the arena (where kolod reads them).
  bool InArena(const void* p, uint64_t bytes) const;
  // A request id no other request of this client has.
  uint64_t NextId() { return next_id_.fetch_add(1, std::memory_order_relaxed); }

  // Submits one checked request: a whole tensor, or part `part` of the
  // tensor whose handle is `whole`. Waits for room in flight and in the ring.
  absl::StatusOr<Handle> Enqueue(const SubmitSpec& spec, uint64_t whole = 0, uint64_t part = 0);
  // Tells kolod that this rank will not take part in `spec`'s collective
  // for `why`, so that it fails on every rank instead of leaving the others
  // waiting (abi kSlotFlagRefusal). Returns `why`. Kinds other than
  // allreduce, allgather, broadcast, alltoall and reducescatter, and names
  // kolod would not accept, send nothing.
  absl::Status Refuse(const SubmitSpec& spec, const absl::Status& why);

  // The handle `id` of a tensor in parts: pending until CompleteWhole.
  void AddWhole(uint64_t id, const SubmitSpec& spec);
  void RemoveWhole(uint64_t id);
  void CompleteWhole(uint64_t id, const absl::Status& status);

  // Moves completions out of the ring.
  void Drain();
  // Sleeps until the completion doorbell rings, the session dies, `until`
  // (at most kMaxSleep), or `wake` holds.
  void SleepForCompletions(absl::Time until, absl::FunctionRef<bool()> wake);
  void SleepForCompletions(absl::Time until);
  // Wakes the threads sleeping for completions.
  void WakeCompletionSleepers();

  absl::Status WaitFor(Handle handle, absl::Duration timeout);
  // Waits for a control collective and returns its value.
  absl::StatusOr<int64_t> WaitValue(Handle handle);
  absl::StatusOr<HostBuffer> WaitForOutput(Handle handle, const Naming& names);
  absl::StatusOr<AlltoallResult> WaitForAlltoall(Handle handle, const Naming& names);
  // True once complete, waiting at most `timeout` for it.
  absl::StatusOr<bool> Test(Handle handle, absl::Duration timeout);
  absl::StatusOr<bool> Underway(Handle handle);

  // Hands a result back to kolod (a submission that gets no completion).
  void ReleaseResult(uint64_t arena_offset);

 private:
  // A request whose completion the client still has to act on.
  struct Pending {
    uint64_t input_staging = UINT64_MAX;  // arena offsets we allocated
    uint64_t output_staging = UINT64_MAX;
    uint64_t aux_staging = UINT64_MAX;
    void* copy_out_to = nullptr;  // caller's memory, or null
    uint64_t bytes = 0;
    CollectiveKind kind = CollectiveKind::kAllreduce;
    DType dtype = DType::kFloat32;
    std::vector<int64_t> row_shape;  // the input's shape without dimension 0
    int process_set = kGlobalProcessSet;
    std::shared_ptr<client::DevicePending> device;  // device requests
    // A refusal notice: nobody waits for it; its completion only frees
    // the reason's staging.
    bool refusal = false;
    // A part of the tensor whose handle is `whole` (its first part?).
    uint64_t whole = 0;
    bool first_part = false;
  };
  // A completed request, until Wait takes it.
  struct Done {
    absl::Status status;
    uint64_t result_offset = 0;
    uint64_t result_bytes = 0;
    int64_t value = 0;
    CollectiveKind kind = CollectiveKind::kAllreduce;
    DType dtype = DType::kFloat32;
    std::vector<int64_t> row_shape;
    int process_set = kGlobalProcessSet;
  };
  // What became of a handle by AwaitHandle's deadline.
  enum class HandleState { kDone, kDead, kRunning };

  // Waits until `handle` completed or the session died, for at most
  // `timeout`, sending parts meanwhile; an unknown handle is an error.
  // Consumes nothing: WaitDone and Test share it.
  absl::StatusOr<HandleState> AwaitHandle(Handle handle, absl::Duration timeout);
  absl::StatusOr<Done> WaitDone(Handle handle, absl::Duration timeout);

  void DrainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(completion_mu_);
  // The completion `slot` of `p`, which completed with `status`.
  Done ToDone(const Pending& p, const abi::v1::CompletionSlot& slot, absl::Status status) const;
  void CompleteWholeLocked(uint64_t id, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(completion_mu_);

  // The steps of Enqueue: whether kolod reads and writes `spec`'s tensors
  // where they are in this process (caller memory) instead of through the
  // arena; tensors into the arena (offsets out; staging recorded in `p`);
  // a place among the requests in flight; the slot into the submission
  // ring. Each frees `p`'s staging when it fails.
  bool ByAddress(const SubmitSpec& spec, bool on_device, uint64_t bytes) const;
  absl::Status PlaceInArena(const SubmitSpec& spec, bool on_device, Pending* p, uint64_t* in_off,
                            uint64_t* out_off, uint64_t* aux_off);
  absl::Status ReserveInFlight(uint64_t request_id, const Pending& p);
  absl::Status PushSlot(const abi::v1::SubmitSlot& slot, const Pending& p);
  // Pushes `slot`, sleeping while the ring is full: kOk, kCorrupt, or
  // kEmptyOrFull when the session died meanwhile.
  RingResult Push(const abi::v1::SubmitSlot& slot);
  void FreeStaging(const Pending& p);
  void FreeStagingLocked(const Pending& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(arena_->mu);

  const Session* const session_;
  PartHooks* const parts_;
  std::shared_ptr<SharedSegment> segment_;
  abi::v1::SegmentHeader* header_ = nullptr;
  std::shared_ptr<HostBuffer::Arena> arena_;
  uint32_t completion_capacity_ = 0;
  std::atomic<uint64_t> next_id_{1};
  const std::unique_ptr<client::DeviceTensorIo> device_io_ = client::MakeDeviceTensorIo();

  absl::Mutex submit_mu_;
  SpscRing<abi::v1::SubmitSlot> submit_ring_ ABSL_GUARDED_BY(submit_mu_);

  absl::Mutex completion_mu_;
  SpscRing<abi::v1::CompletionSlot> completion_ring_;
  uint64_t ring_in_flight_ ABSL_GUARDED_BY(completion_mu_) = 0;
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(completion_mu_);
  absl::flat_hash_map<uint64_t, Done> done_ ABSL_GUARDED_BY(completion_mu_);
};

}  // namespace kolo
