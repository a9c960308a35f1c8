// ClientImpl: libkolo's session with kolod — the Attach stream, the session's
// shared-memory segment and its rings, the arena allocator and the table of
// requests in flight.
//
// Thread-safety: thread-safe. Submissions are serialised by submit_mu_, the
// completion ring and request tables by completion_mu_; a watcher thread
// reads the Attach stream and marks the session dead when it ends.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/device_tensor_io.h"
#include "common/arena_allocator.h"
#include "common/shared_segment.h"
#include "common/spsc_ring.h"
#include "kolo/kolo.h"
#include "proto/kolo/abi/collective_traits.h"
#include "proto/kolo/abi/shm_abi_v1.h"
#include "proto/kolo/v1/node.grpc.pb.h"

namespace kolo {

// The session arena as seen by HostBuffer: the client's allocator over the
// front of the mapping, and the hand-back of results kolod placed at its end.
struct HostBuffer::Arena {
  Arena(std::shared_ptr<const SharedSegment> seg, uint8_t* b, uint64_t bytes, uint64_t client_bytes)
      : segment(std::move(seg)), base(b), size(bytes), alloc(client_bytes, 64) {}
  // The mapping the arena lies in: every HostBuffer holds the Arena, so its
  // memory stays mapped in this process after the Client is gone (a
  // framework tensor viewing it cannot dangle).
  const std::shared_ptr<const SharedSegment> segment;
  uint8_t* const base;
  const uint64_t size;  // the whole arena, result area included
  absl::Mutex mu;
  ArenaAllocator alloc ABSL_GUARDED_BY(mu);
  // Hands a result back to kolod; cleared when the client goes away.
  std::function<void(uint64_t)> release_result ABSL_GUARDED_BY(mu);

  bool Contains(const void* p, uint64_t bytes) const {
    auto* b = static_cast<const uint8_t*>(p);
    return b >= base && b <= base + size && bytes <= static_cast<uint64_t>(base + size - b);
  }
  void ReleaseResult(uint64_t offset) {
    std::function<void(uint64_t)> release;
    {
      absl::MutexLock l(&mu);
      release = release_result;
    }
    if (release) release(offset);
  }
};

// Everything one submission says; built by the Client methods.
struct SubmitSpec {
  CollectiveKind kind;
  ConstTensorView input;
  // Allreduce and broadcast; device allgather and reducescatter (the others
  // return a new tensor in the result area).
  TensorView output;
  std::string_view name;
  AllreduceOptions reduce;
  int root_rank = 0;
  int process_set = kGlobalProcessSet;
  uint64_t group_id = 0;
  uint32_t group_size = 0;
  std::vector<int64_t> aux;  // alltoall splits, process-set ranks
  // A part of a larger tensor (abi kSlotFlagPart): that tensor's shape.
  std::optional<std::vector<int64_t>> part_of;
};

class ClientImpl {
 public:
  static absl::StatusOr<std::unique_ptr<ClientImpl>> Connect(const ClientOptions& options);
  ~ClientImpl();

  const ClientOptions& options() const { return options_; }
  const std::string& session_id() const { return session_id_; }
  uint64_t epoch() const { return epoch_; }
  absl::StatusOr<Client::ElasticStatus> GetElasticStatus() const;
  // Ends the session now (the destructor does it otherwise): detaches,
  // telling kolod whether the rank `rejoin`s the next epoch of an elastic
  // job, and waits for the stream to end. Later calls fail. Idempotent.
  void Close(bool rejoin);

  absl::StatusOr<HostBuffer> Allocate(DType dtype, std::vector<int64_t> shape);
  absl::StatusOr<Handle> Submit(const SubmitSpec& spec);
  // Tells kolod that this rank will not take part in `spec`'s collective
  // (its own checks refused it for `why`), so that it fails on every rank
  // instead of leaving the others waiting (abi kSlotFlagRefusal). Returns
  // `why`. Kinds other than allreduce, allgather, broadcast, alltoall and
  // reducescatter, and names kolod would not accept, send nothing.
  absl::Status Refuse(const SubmitSpec& spec, const absl::Status& why);
  // Submits `specs` as one group (same group id on every rank).
  absl::StatusOr<std::vector<Handle>> SubmitGroup(std::vector<SubmitSpec> specs);
  absl::Status WaitFor(Handle handle, absl::Duration timeout);
  absl::StatusOr<HostBuffer> WaitForOutput(Handle handle);
  absl::StatusOr<AlltoallResult> WaitForAlltoall(Handle handle);
  // True once complete, waiting at most `timeout` for it.
  absl::StatusOr<bool> Test(Handle handle, absl::Duration timeout);
  absl::StatusOr<bool> Underway(Handle handle);
  bool caller_memory() const { return caller_memory_; }

  absl::Status Barrier(int process_set);
  absl::StatusOr<int> Join();
  absl::StatusOr<int> AddProcessSet(std::vector<int> ranks);
  absl::Status RemoveProcessSet(int process_set);
  absl::StatusOr<int> ProcessSetRank(int process_set) const;
  absl::StatusOr<int> ProcessSetSize(int process_set) const;

  absl::Status StartTimeline(uint64_t max_events);
  absl::StatusOr<TimelineTrace> StopTimeline();

 private:
  // Calls JobTimeline for this session.
  absl::StatusOr<kolo::v1::JobTimelineResponse> JobTimeline(
      kolo::v1::JobTimelineRequest::Action action, uint64_t max_events);
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
    // A tensor submitted in parts (SubmitInParts): each part names the
    // request the caller holds; that one counts the parts not yet complete
    // and keeps the first failure.
    uint64_t whole = 0;
    bool first_part = false;
    uint64_t parts_left = 0;
    absl::Status parts_status;
  };
  // A tensor in parts whose parts are not all complete: what the part pump
  // needs to send the rest.
  struct Whole {
    SubmitSpec spec;  // spec.name views `name`
    std::string name;
    uint64_t parts = 0;
    uint64_t part_elems = 0;
    uint64_t next = 1;  // the next part to send
    uint32_t in_flight = 0;
    bool copied = false;  // the parts are copied through the arena
    bool first_done = false;
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

  // Sleepers re-check the session's liveness at least this often.
  static constexpr absl::Duration kMaxSleep = absl::Milliseconds(100);

  // What became of a handle by AwaitHandle's deadline.
  enum class HandleState { kDone, kDead, kRunning };
  // Waits until `handle` completed or the session died, for at most
  // `timeout`, sending parts meanwhile (Waiting); an unknown handle is an
  // error. Consumes nothing: WaitDone and Test share it.
  absl::StatusOr<HandleState> AwaitHandle(Handle handle, absl::Duration timeout);
  absl::StatusOr<Done> WaitDone(Handle handle, absl::Duration timeout);
  // Counts the calling thread in waiting_ while it lives: it waits on or
  // tests a handle and sends parts itself, so the pump stands by.
  // Thread-safety: lives on the stack of the thread it counts.
  class Waiting {
   public:
    explicit Waiting(ClientImpl* client);
    ~Waiting();
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    ClientImpl* client_;
  };
  // Whether `spec` goes in parts, and submitting it so (client_parts.cc).
  bool InParts(const SubmitSpec& spec, bool on_device) const;
  absl::StatusOr<Handle> SubmitInParts(const SubmitSpec& spec);
  // Submits one request (a whole tensor, or part `part` of tensor `whole`).
  absl::StatusOr<Handle> SubmitOne(const SubmitSpec& spec, uint64_t whole = 0, uint64_t part = 0);
  // Part `i` of `w`; its name is kept in `*name`.
  static SubmitSpec PartSpec(const Whole& w, uint64_t i, std::string* name);
  // A part completed (or will never be sent) with `status`.
  void PartDone(uint64_t whole, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(completion_mu_);
  // The part pump's thread: sends the parts after the first, at most
  // kPartsInFlight of a tensor at a time, as earlier ones complete.
  void PumpParts();
  bool PumpHasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(completion_mu_);
  // Drains completions and sends the parts that may go now (any thread);
  // returns whether tensors in parts remain, `*sent` whether it sent any.
  bool AdvanceParts(bool* sent);
  // Submits a control collective (no tensor) and returns its value.
  absl::StatusOr<int64_t> RunControl(CollectiveKind kind, const std::string& name, int process_set,
                                     std::vector<int64_t> aux);
  // Hands a result back to kolod (a submission that gets no completion).
  void ReleaseResult(uint64_t arena_offset);
  uint64_t NextCounter(const std::string& key);

  explicit ClientImpl(const ClientOptions& options);
  absl::Status Attach();
  void WatchStream();
  // Moves completions out of the ring into done_.
  void DrainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(completion_mu_);
  // Sleeps until the completion doorbell rings, the session dies or `until`.
  void SleepForCompletions(absl::Time until);
  absl::Status DeadStatus() const;
  bool Dead() const;
  void Finish(uint64_t id, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(completion_mu_);
  void FreeStaging(const Pending& p);
  // The steps of Submit (see client_impl.cc): tensors into the arena
  // (offsets out; staging recorded in `p`), a place among the requests in
  // flight, the slot into the submission ring. Each frees `p`'s staging
  // when it fails.
  // Whether kolod reads and writes `spec`'s tensors where they are in this
  // process (caller memory) instead of through the arena.
  bool ByAddress(const SubmitSpec& spec, bool on_device, uint64_t bytes) const;
  absl::Status PlaceInArena(const SubmitSpec& spec, bool on_device, Pending* p, uint64_t* in_off,
                            uint64_t* out_off, uint64_t* aux_off);
  absl::Status ReserveInFlight(uint64_t request_id, const Pending& p);
  absl::Status PushSlot(const abi::v1::SubmitSlot& slot, const Pending& p);

  ClientOptions options_;  // written once, by Attach (an elastic seat), before any use
  std::shared_ptr<SharedSegment> segment_;
  abi::v1::SegmentHeader* header_ = nullptr;
  std::shared_ptr<HostBuffer::Arena> arena_;
  uint32_t completion_capacity_ = 0;

  absl::Mutex submit_mu_;
  SpscRing<abi::v1::SubmitSlot> submit_ring_ ABSL_GUARDED_BY(submit_mu_);

  absl::Mutex completion_mu_;
  SpscRing<abi::v1::CompletionSlot> completion_ring_;
  uint64_t ring_in_flight_ ABSL_GUARDED_BY(completion_mu_) = 0;
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(completion_mu_);
  absl::flat_hash_map<uint64_t, Done> done_ ABSL_GUARDED_BY(completion_mu_);
  absl::flat_hash_map<uint64_t, std::unique_ptr<Whole>> wholes_ ABSL_GUARDED_BY(completion_mu_);
  bool pump_stop_ ABSL_GUARDED_BY(completion_mu_) = false;
  int waiting_ ABSL_GUARDED_BY(completion_mu_) = 0;  // threads in WaitDone or Test
  std::atomic<bool> pump_kick_{false};               // a part completed since the pump last looked
  std::thread pump_;                                 // started with the first tensor in parts
  std::atomic<uint64_t> next_id_{1};
  const std::unique_ptr<client::DeviceTensorIo> device_io_ = client::MakeDeviceTensorIo();

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<kolo::v1::Node::Stub> stub_;
  grpc::ClientContext attach_context_;
  std::unique_ptr<grpc::ClientReaderWriter<kolo::v1::ClientMessage, kolo::v1::DaemonMessage>>
      stream_;
  std::string session_id_;
  uint64_t epoch_ = 0;  // elastic jobs
  absl::Mutex close_mu_;
  bool closed_ ABSL_GUARDED_BY(close_mu_) = false;
  // Caller memory: offered by kolod at attach, and the probe it read.
  bool caller_memory_ = false;
  bool tensor_parts_ = false;  // kolod takes tensors in parts (AttachResponse)
  std::array<uint8_t, 16> caller_memory_probe_{};
  std::thread watcher_;

  // Per-purpose counters that name barriers, joins, groups and process-set
  // changes identically on every rank (ranks issue them in the same order).
  mutable absl::Mutex counters_mu_;
  absl::flat_hash_map<std::string, uint64_t> counters_ ABSL_GUARDED_BY(counters_mu_);
  // Process sets this client knows, by id (0: every rank).
  absl::flat_hash_map<int, std::vector<int>> process_sets_ ABSL_GUARDED_BY(counters_mu_);

  mutable absl::Mutex dead_mu_;
  std::atomic<bool> dead_{false};
  absl::Status dead_status_ ABSL_GUARDED_BY(dead_mu_);
};

}  // namespace kolo
