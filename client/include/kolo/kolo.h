// libkolo's C++ API: attach a training process (a rank) to its node's kolod
// and run collectives on host tensors.
//
//   auto client = kolo::Client::Connect(kolo::ClientOptions::FromEnv().value());
//   kolo::HostBuffer grad = client.value()->Allocate(kolo::DType::kFloat32, {256, 10}).value();
//   ... fill grad.data() ...
//   absl::Status s = client.value()->Allreduce(grad.view(), grad.view(), "grad/w1",
//                                              kolo::ReduceOp::kAverage);
//
// Tensors live either in SDK-allocated shared memory (`Client::Allocate`,
// zero copy) or in the caller's own memory (copied in at submission and out at
// completion; the caller keeps the memory alive and untouched until Wait).
//
// Thread-safety: Client is safe to use from several threads; HostBuffer and
// Handle are values owned by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/kolo/abi/types.h"

namespace kolo {

// Where and who this process is. FromEnv reads KOLO_SOCKET (default
// /run/kolo/kolod.sock), KOLO_JOB_ID, KOLO_JOB_TOKEN, KOLO_COORDINATOR,
// KOLO_RANK, KOLO_SIZE,
// KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE, KOLO_ARENA_BYTES and KOLO_SPIN_US; a missing rank/size
// means a job of one rank. Without KOLO_RANK, the launchers' own variables
// are read: OpenMPI's OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} or
// Slurm's SLURM_{PROCID,NTASKS,LOCALID} and SLURM_STEP_TASKS_PER_NODE, with
// the job id taken from the launcher too.
struct ClientOptions {
  std::string socket_path = "/run/kolo/kolod.sock";
  std::string job_id = "default";
  std::string job_token;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  // Multi-node jobs: the peer address (host:port) of the daemon hosting
  // rank 0 (KOLO_COORDINATOR).
  std::string coordinator;
  // Bytes of shared memory for host tensors (sparse: pages are used on touch).
  uint64_t arena_bytes = uint64_t{1} << 30;
  // The part of the arena where kolod places allgather, reducescatter and
  // alltoall outputs (KOLO_RESULT_BYTES); 0 means a quarter of the arena.
  uint64_t result_bytes = 0;
  // How long a waiting call polls before it sleeps (KOLO_SPIN_US).
  absl::Duration spin = absl::Microseconds(50);
  // One-node jobs: host allreduce and broadcast tensors of at least
  // caller_memory_min_bytes that are not in the arena are read and written
  // by kolod where they are (cross-memory attach, when kolod offers it)
  // instead of being copied through the arena (KOLO_CALLER_MEMORY=1 turns
  // it on; KOLO_CALLER_MEMORY_MIN_BYTES). Off by default: where the
  // kernel's cross-process copy is much slower than memcpy (measured 6.8
  // against 15 GB/s on a 2-core VM) copying through the arena is faster.
  bool caller_memory = false;
  uint64_t caller_memory_min_bytes = 64 << 10;
  // How long Connect waits for the daemon's socket to appear.
  absl::Duration connect_timeout = absl::Seconds(10);

  // Elastic jobs (one node): kolod numbers the ranks and re-forms the job
  // in a new membership epoch when a rank dies, leaves or joins; rank, size
  // and the local values above are then hints (the first epoch orders ranks
  // by them) and Client::rank() and the others say what kolod assigned.
  // Collectives of an ended epoch fail with MEMBERSHIP_CHANGED
  // (IsMembershipChanged); the rank then calls Client::Reset. KOLO_ELASTIC=1,
  // KOLO_ELASTIC_MIN_SIZE, KOLO_ELASTIC_MAX_SIZE (0: no bound),
  // KOLO_ELASTIC_JOINER=1 (a rank started after the job began); kolorun
  // --min-np/--max-np sets them.
  struct Elastic {
    bool enabled = false;
    int min_size = 1;
    int max_size = 0;
    bool joiner = false;
    int previous_rank = -1;  // set by Client::Reset
    uint64_t previous_epoch = 0;
  } elastic;

  // The job's own settings: every rank of the job must set the same (kolod
  // refuses a rank that asks for others). FromEnv reads them from KOLO_* or
  // HOROVOD_* variables (docs/horovod_env.md).
  struct JobSettings {
    // Bytes fused into one response (0: no fusion); unset: kolod's
    // --fusion_threshold, which also bounds it.
    std::optional<uint64_t> fusion_threshold_bytes;
    // Names the coordinator of a job across nodes caches; unset: kolod's.
    std::optional<uint32_t> cache_capacity;
    // kolod tunes the fusion threshold while the job runs (Bayesian
    // optimisation over the first samples); rank 0 appends every sample
    // to `autotune_log` (CSV) when set. Counts of 0 take kolod's defaults.
    bool autotune = false;
    std::string autotune_log;
    uint32_t autotune_warmup_samples = 0;
    uint32_t autotune_steps_per_sample = 0;
    uint32_t autotune_max_samples = 0;
    double autotune_noise = 0;
  } job;
  // Variables FromEnv read that change nothing here, each with why; rank 0
  // prints them once when it connects.
  std::vector<std::string> env_notes;

  static absl::StatusOr<ClientOptions> FromEnv();
};

// A non-owning view of a tensor: `data` points at `shape`'s elements of
// `dtype`, densely packed in row-major order.
//
// `device` says where: -1 (the default) is host memory; an ordinal N is the
// memory of CUDA device N, allocated with cudaMalloc (not managed memory),
// which kolod reads and writes through CUDA IPC. Device tensors work for
// allreduce, broadcast, allgather and reducescatter (the forms with an
// output view) of the whole job (not a process set), on one node or across
// nodes, with input and output on the same device; a rank keeps
// the GPU of its first device tensor for the job's life (ranks may use
// different GPUs). AllreduceOptions::cuda_stream and
// CollectiveOptions::cuda_stream order them with the caller's work. A
// libkolo built without CUDA refuses them with UNIMPLEMENTED.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  int device = -1;  // -1: host memory; else a CUDA ordinal

  int64_t num_elements() const;
  uint64_t byte_size() const;
};

struct ConstTensorView {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  int device = -1;  // as TensorView::device

  ConstTensorView() = default;
  ConstTensorView(const void* d, DType t, std::vector<int64_t> s, int dev = -1)
      : data(d), dtype(t), shape(std::move(s)), device(dev) {}
  ConstTensorView(const TensorView& v)  // NOLINT: a mutable view is readable.
      : data(v.data), dtype(v.dtype), shape(v.shape), device(v.device) {}

  int64_t num_elements() const;
  uint64_t byte_size() const;
};

class Client;

// A tensor in the session's shared-memory arena: collectives on it move no
// bytes between the process and kolod. Freed when destroyed. It may outlive
// the Client that allocated it: its memory stays mapped in this process (as
// plain memory, no longer shared with kolod) until the last HostBuffer goes.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  uint64_t byte_size() const { return bytes_; }
  TensorView view() const { return TensorView{data_, dtype_, shape_}; }

  struct Arena;  // opaque: the session arena's allocator

 private:
  friend class Client;
  friend class ClientImpl;
  HostBuffer(std::shared_ptr<Arena> arena, void* data, uint64_t bytes, DType dtype,
             std::vector<int64_t> shape, int64_t result_offset = -1)
      : arena_(std::move(arena)),
        data_(data),
        bytes_(bytes),
        dtype_(dtype),
        shape_(std::move(shape)),
        result_offset_(result_offset) {}
  void Release();

  std::shared_ptr<Arena> arena_;
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_;
  // For an output kolod placed in the result area: the offset to hand back.
  int64_t result_offset_ = -1;
};

// Identifies one submitted collective until Wait or a successful Test.
struct Handle {
  uint64_t id = 0;
};

// The process set of every rank of the job.
inline constexpr int kGlobalProcessSet = 0;

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;
  // Each input is multiplied by `prescale` before the reduction and the
  // result by `postscale` after it (average divides by size on top).
  double prescale = 1.0;
  double postscale = 1.0;
  Compression compression = Compression::kNone;
  // Ranks that take part (see AddProcessSet); names are per process set.
  int process_set = kGlobalProcessSet;
  // Device tensors only: the cudaStream_t that produces the input and
  // consumes the output (null: the legacy default stream). The SDK records
  // an event on it before submitting, which kolod's stream waits on; when
  // the completion arrives (in Wait) it makes this stream wait on kolod's
  // "done" event (cudaStreamWaitEvent). Nothing synchronises the host: work
  // enqueued on the stream after Wait returns sees the result.
  void* cuda_stream = nullptr;
};

struct CollectiveOptions {
  int process_set = kGlobalProcessSet;
  // Device tensors (broadcast, allgather) only: as
  // AllreduceOptions::cuda_stream.
  void* cuda_stream = nullptr;
};

// What an alltoall returns: the received rows, concatenated in the order of
// the ranks that sent them, and how many rows came from each.
struct AlltoallResult {
  HostBuffer output;
  std::vector<int64_t> received_splits;
};

// A job's timeline as its node's kolod recorded it (Client::StopTimeline).
struct TimelineTrace {
  // Chrome trace event format: one process row for the job, one thread row
  // per rank, a tensor's phases (QUEUED, NEGOTIATED, FUSED, REDUCED, DONE)
  // as spans and instants named "<PHASE> <tensor>"; loads in Perfetto.
  std::string json;
  uint64_t events = 0;
  uint64_t dropped = 0;  // events past max_events, counted, not kept
};

class ClientImpl;

class Client {
 public:
  // Attaches to kolod: creates the session's shared-memory segment and opens
  // the Attach stream. UNAVAILABLE when no daemon answers in time.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();  // Detaches; pending collectives fail with CANCELLED.

  int rank() const;
  int size() const;
  int local_rank() const;
  int local_size() const;
  const std::string& session_id() const;

  // Elastic jobs: the membership epoch this client's session belongs to
  // (1 for the first; 0 for a job that is not elastic).
  uint64_t epoch() const;
  struct ElasticStatus {
    uint64_t epoch = 0;          // this session's
    uint64_t current_epoch = 0;  // the job's; larger once this one ended
    int joiners_waiting = 0;     // ranks waiting to join at the next reset
  };
  absl::StatusOr<ElasticStatus> GetElasticStatus() const;
  // Elastic jobs: leaves this client's epoch and attaches again for the
  // next one, which forms once every rank of this epoch reset or is gone;
  // returns the new client (its rank and size may differ). This client's
  // session ends at once: its calls fail from then on (drop it), its
  // HostBuffers stay valid as plain memory.
  absl::StatusOr<std::unique_ptr<Client>> Reset();
  // Whether kolod reads and writes this session's large host allreduce and
  // broadcast tensors where they are in this process (caller memory).
  bool caller_memory() const;

  // A zero-copy tensor in the session's arena.
  absl::StatusOr<HostBuffer> Allocate(DType dtype, std::vector<int64_t> shape);

  // Reduces `input` across the job's ranks into `output` (same dtype and
  // shape; may be the same memory). `name` identifies the collective across
  // ranks and must not be in flight twice on one rank. The *Async calls:
  // `input` and `output` must stay valid, and `input` unchanged, until the
  // handle is waited for (kolod may read and write them where they are).
  absl::StatusOr<Handle> AllreduceAsync(const ConstTensorView& input, const TensorView& output,
                                        std::string_view name,
                                        const AllreduceOptions& options = {});
  absl::Status Allreduce(const ConstTensorView& input, const TensorView& output,
                         std::string_view name, const AllreduceOptions& options = {});
  absl::Status Allreduce(const ConstTensorView& input, const TensorView& output,
                         std::string_view name, ReduceOp op) {
    return Allreduce(input, output, name, AllreduceOptions{.op = op});
  }

  // Replaces `tensor` on every rank with root_rank's `tensor`.
  // `root_rank` is a global rank; it must belong to the process set.
  absl::StatusOr<Handle> BroadcastAsync(const TensorView& tensor, std::string_view name,
                                        int root_rank, const CollectiveOptions& options = {});
  absl::Status Broadcast(const TensorView& tensor, std::string_view name, int root_rank,
                         const CollectiveOptions& options = {});

  // Concatenates every rank's `input` along the first dimension, in rank
  // order (the first dimension may differ per rank; the others must match).
  absl::StatusOr<Handle> AllgatherAsync(const ConstTensorView& input, std::string_view name,
                                        const CollectiveOptions& options = {});
  absl::StatusOr<HostBuffer> Allgather(const ConstTensorView& input, std::string_view name,
                                       const CollectiveOptions& options = {});
  // Device tensors: gathers into `output` on the input's GPU, whose size the
  // caller knows (the sum of every rank's rows, e.g. from a host allgather of
  // the first dimensions); kolod fails a rank whose output has another size.
  // Wait on the handle; the output is ordered with options.cuda_stream.
  absl::StatusOr<Handle> AllgatherAsync(const ConstTensorView& input, const TensorView& output,
                                        std::string_view name,
                                        const CollectiveOptions& options = {});

  // Reduces `input` (same shape on every rank; op sum or average) and returns
  // this rank's block of rows: the first dimension is split across ranks, the
  // lower ranks taking one extra row when it does not divide evenly.
  absl::StatusOr<Handle> ReducescatterAsync(const ConstTensorView& input, std::string_view name,
                                            const AllreduceOptions& options = {});
  absl::StatusOr<HostBuffer> Reducescatter(const ConstTensorView& input, std::string_view name,
                                           const AllreduceOptions& options = {});
  // Device tensors: this rank's rows of the result into `output` on the
  // input's GPU: rows / size, one more for the first rows % size ranks (as
  // the form above). Wait on the handle.
  absl::StatusOr<Handle> ReducescatterAsync(const ConstTensorView& input, const TensorView& output,
                                            std::string_view name,
                                            const AllreduceOptions& options = {});

  // Sends splits[j] rows of `input` (in order) to rank j of the process set
  // and receives what every rank sent to this one. Empty `splits` divides
  // the first dimension evenly.
  absl::StatusOr<Handle> AlltoallAsync(const ConstTensorView& input, std::vector<int64_t> splits,
                                       std::string_view name,
                                       const CollectiveOptions& options = {});
  absl::StatusOr<AlltoallResult> Alltoall(const ConstTensorView& input, std::vector<int64_t> splits,
                                          std::string_view name,
                                          const CollectiveOptions& options = {});

  // Tells the other ranks of `process_set` that this rank will not take part
  // in the collective `kind` named `name` because of `why` (a check of the
  // caller's own failed, e.g. a framework's dtype rule): kolod fails that
  // collective on every rank with this reason once all of them submitted it,
  // where the others would otherwise wait for the stall timeout. Returns
  // `why`. The *Async calls do this themselves when their checks refuse a
  // request.
  absl::Status Refuse(CollectiveKind kind, std::string_view name, int process_set,
                      const absl::Status& why);

  // Returns once every rank of the process set has called it.
  absl::Status Barrier(const CollectiveOptions& options = {});

  // Declares that this rank has no more data. Until every rank has joined,
  // this rank contributes zeros to the others' allreduces (collectives that
  // cannot work without it fail with FAILED_PRECONDITION). Returns the last
  // rank to join, once all have.
  absl::StatusOr<int> Join();

  // Several tensors negotiated as one unit and fused: none runs before all
  // are ready on every rank. `names` must have one entry per tensor.
  absl::StatusOr<std::vector<Handle>> GroupedAllreduceAsync(
      const std::vector<ConstTensorView>& inputs, const std::vector<TensorView>& outputs,
      const std::vector<std::string>& names, const AllreduceOptions& options = {});
  absl::StatusOr<std::vector<Handle>> GroupedAllgatherAsync(
      const std::vector<ConstTensorView>& inputs, const std::vector<std::string>& names,
      const CollectiveOptions& options = {});
  absl::StatusOr<std::vector<Handle>> GroupedReducescatterAsync(
      const std::vector<ConstTensorView>& inputs, const std::vector<std::string>& names,
      const AllreduceOptions& options = {});

  // Creates a process set of the given global ranks; every rank of the job
  // must call it, with the same list, in the same order relative to other
  // AddProcessSet/RemoveProcessSet calls. Returns its id (> 0).
  absl::StatusOr<int> AddProcessSet(std::vector<int> ranks);
  // Removes a process set; every rank of the job must call it.
  absl::Status RemoveProcessSet(int process_set);
  // This rank's position in `process_set` and the set's size.
  absl::StatusOr<int> ProcessSetRank(int process_set) const;
  absl::StatusOr<int> ProcessSetSize(int process_set) const;

  // Starts recording this job's timeline on this node: the collectives of
  // every rank of the job attached to this kolod (not other nodes' ranks,
  // not other jobs). Any local rank may start it; starting while recording
  // restarts (what was recorded is discarded). `max_events` bounds the
  // recording (0: kolod's default, also its limit; INVALID_ARGUMENT above).
  absl::Status StartTimeline(uint64_t max_events = 0);
  // Stops the recording and returns it; FAILED_PRECONDITION when none is
  // being recorded. kolod writes no file: the caller puts the trace where
  // it wants, with its own permissions.
  absl::StatusOr<TimelineTrace> StopTimeline();

  // Blocks until the collective completes; its result. Consumes the handle.
  absl::Status Wait(Handle handle);
  // For allgather, reducescatter and alltoall handles: waits and returns the
  // output tensor (in the session's shared memory).
  absl::StatusOr<HostBuffer> WaitForOutput(Handle handle);
  absl::StatusOr<AlltoallResult> WaitForAlltoall(Handle handle);
  // Waits at most `timeout`; DEADLINE_EXCEEDED if still running (the handle
  // stays valid).
  absl::Status WaitFor(Handle handle, absl::Duration timeout);
  // True once complete (then Wait returns at once with the result).
  absl::StatusOr<bool> Test(Handle handle);
  // As Test, but waits at most `timeout` for the collective to complete
  // (the handle stays valid either way).
  absl::StatusOr<bool> TestFor(Handle handle, absl::Duration timeout);
  // True once every rank has submitted the collective, so that it
  // completes without another call of this rank's (a caller that must not
  // block on peers waiting for its later calls may then wait for it): a
  // tensor sent in parts once its first part completed, any other
  // collective once complete. The handle stays valid.
  absl::StatusOr<bool> Underway(Handle handle);

 private:
  explicit Client(std::unique_ptr<ClientImpl> impl);
  std::unique_ptr<ClientImpl> impl_;
};

}  // namespace kolo
