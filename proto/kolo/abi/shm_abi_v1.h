// The shared-memory ABI between libkolo and kolod, version 1.
//
// One segment per session, created by the client as a sealed memfd (it cannot
// shrink or grow once attached) and handed to kolod over its handoff socket
// (common/handoff.h).
// Layout, every offset 4 KiB aligned:
//
//   [SegmentHeader][SubmitSlot x submit_capacity][CompletionSlot x completion_capacity][arena]
//
// The rings are single-producer/single-consumer and hold plain data only:
// tensors are named by arena offsets, never pointers. Everything the daemon
// reads from the segment is untrusted: it copies a slot out of the ring before
// validating it, and it takes sizes and offsets from the header only once, at
// attach time, after checking them.
//
// Doorbells are futex words (shared, not private futexes). The waiter
// announces itself in `waiters` before sleeping; the ringer bumps `seq` and
// wakes only when someone waits, so an idle ring costs no system calls.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

namespace kolo::abi::v1 {

inline constexpr uint64_t kMagic = 0x314d48534f4c4f4bULL;  // "KOLOSHM1"
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kMaxDims = 8;
inline constexpr uint32_t kMaxNameBytes = 200;
inline constexpr uint32_t kMaxMessageBytes = 208;
// Most int64 entries a request's auxiliary array (alltoall splits, process
// set ranks) may hold.
inline constexpr uint64_t kMaxAuxEntries = 1 << 20;
// A submission whose kind is this is no collective: it hands a result buffer
// (input_offset) back to kolod.
inline constexpr uint32_t kReleaseResult = 100;
inline constexpr uint64_t kAlignment = 4096;

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

struct alignas(64) Doorbell {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> waiters;
};

struct alignas(64) RingIndex {
  std::atomic<uint64_t> value;
};

// SubmitSlot::flags.
inline constexpr uint32_t kSlotFlagDevice = 1;  // the tensors are in GPU memory
// A refusal: this rank will not take part in the collective `kind` named
// `name` in `process_set` (and, for a group member, `group_id`/`group_size`)
// because its request failed the client's own checks. The reason's text
// (at most kMaxMessageBytes) is at `input_offset`, `byte_length` bytes;
// every other field is zero. kolod fails that collective on every rank of
// the set with the reason, once all of them have submitted it, so an error
// one rank decides reaches all (the refusal's own completion comes then).
inline constexpr uint32_t kSlotFlagRefusal = 2;
// Caller memory: `input_offset` and `output_offset` are addresses in the
// submitting process, where the tensors are (host allreduce and broadcast,
// in sessions whose AttachResponse said caller_memory). kolod reads and
// writes them there (cross-memory attach) instead of in the arena.
inline constexpr uint32_t kSlotFlagCallerMemory = 4;
// One part of a larger host allreduce or broadcast tensor (a client sends
// large tensors in parts): `shape` is the whole tensor's, `byte_length` this
// part's bytes (whole elements, at least one, at most the shape's). Ranks
// are checked to agree on the whole shape, as for the tensor itself. The
// first part goes under the tensor's name; a later part's name is the
// tensor's, kPartSeparator and the part's number in decimal. Names hold no
// control characters otherwise, so no tensor's name is some part's.
inline constexpr uint32_t kSlotFlagPart = 8;
inline constexpr char kPartSeparator = '\x1f';  // ASCII unit separator
inline constexpr uint32_t kKnownSlotFlags =
    kSlotFlagDevice | kSlotFlagRefusal | kSlotFlagCallerMemory | kSlotFlagPart;
inline constexpr uint32_t kIpcHandleBytes = 64;  // cudaIpc{Mem,Event}Handle_t

// A tensor in GPU memory, named by CUDA IPC handles (device requests only).
// The memory handle names the whole allocation; the tensor starts `offset`
// bytes into it. The event: for an input, recorded by the client after the
// work that produced the tensor (kolod's stream waits on it); for an output,
// recorded by kolod after writing the result (the client's stream waits on
// it).
struct DeviceTensorSlot {
  uint8_t memory_handle[kIpcHandleBytes];
  uint8_t event_handle[kIpcHandleBytes];
  uint64_t offset;
  uint64_t bytes;  // equals the slot's byte_length
  int32_t device;  // CUDA ordinal, as kolod numbers the node's GPUs
  uint32_t reserved;
};
static_assert(sizeof(DeviceTensorSlot) == 152);

// One collective request, written by the client.
struct SubmitSlot {
  uint64_t request_id;  // chosen by the client, echoed in the completion
  uint32_t kind;        // kolo::CollectiveKind, or kReleaseResult
  uint32_t dtype;       // kolo::DType
  uint32_t reduce_op;   // kolo::ReduceOp (allreduce, reducescatter)
  int32_t root_rank;    // broadcast: a global rank
  double prescale;
  double postscale;
  uint64_t input_offset;   // arena offsets
  uint64_t output_offset;  // allreduce and broadcast only
  uint64_t byte_length;    // of the input (and of the output, where given)
  uint32_t ndim;
  uint32_t name_length;
  int64_t shape[kMaxDims];
  char name[kMaxNameBytes];
  uint32_t process_set;  // 0: every rank of the job
  uint32_t compression;  // kolo::Compression (float32 allreduce)
  uint64_t group_id;     // grouped collectives: same id on every rank
  uint32_t group_size;   // members of the group; 0 or 1: no group
  uint32_t reserved;
  uint64_t aux_offset;  // arena offset of int64 entries (splits, ranks)
  uint64_t aux_count;
  uint32_t flags;  // kSlotFlag*
  uint32_t reserved2;
  // With kSlotFlagDevice: the tensors (input_offset and output_offset are
  // then unused and must be 0). Otherwise all zero.
  DeviceTensorSlot device_input;
  DeviceTensorSlot device_output;
};
static_assert(sizeof(SubmitSlot) == 688);

// The outcome of one request, written by kolod.
struct CompletionSlot {
  uint64_t request_id;
  int32_t code;  // absl::StatusCode
  uint32_t message_length;
  // Collectives that return a new tensor: where kolod put it in the result
  // area (arena offsets) and its first dimension. Join: the last rank to
  // join; add_process_set: the new set's id.
  uint64_t result_offset;
  uint64_t result_bytes;
  int64_t value;
  char message[kMaxMessageBytes];
};
static_assert(sizeof(CompletionSlot) == 248);

enum SessionState : uint32_t {
  kSessionOpen = 0,
  kSessionClosed = 1,  // set by kolod when it stops serving the session
};

struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;
  uint32_t submit_capacity;      // power of two
  uint32_t completion_capacity;  // power of two
  uint64_t submit_offset;
  uint64_t completion_offset;
  uint64_t arena_offset;
  uint64_t arena_bytes;
  uint64_t total_bytes;
  // The last result_bytes of the arena are kolod's: it places the outputs
  // of allgather, reducescatter and alltoall there, and the client hands
  // each back (kReleaseResult) when done with it.
  uint64_t result_bytes;

  // Submission ring: the client produces, kolod consumes.
  RingIndex submit_tail;
  RingIndex submit_head;
  Doorbell submit_ready;  // kolod sleeps here when the ring is empty
  Doorbell submit_space;  // the client sleeps here when the ring is full
  // Completion ring: kolod produces, the client consumes.
  RingIndex completion_tail;
  RingIndex completion_head;
  Doorbell completion_ready;  // the client sleeps here
  alignas(64) std::atomic<uint32_t> session_state;
};

inline constexpr uint64_t AlignUp(uint64_t v) { return (v + kAlignment - 1) & ~(kAlignment - 1); }

// The layout a client builds for the given sizes.
struct Layout {
  uint64_t submit_offset;
  uint64_t completion_offset;
  uint64_t arena_offset;
  uint64_t total_bytes;
};

inline constexpr Layout ComputeLayout(uint32_t submit_capacity, uint32_t completion_capacity,
                                      uint64_t arena_bytes) {
  Layout l{};
  l.submit_offset = AlignUp(sizeof(SegmentHeader));
  l.completion_offset = AlignUp(l.submit_offset + uint64_t{submit_capacity} * sizeof(SubmitSlot));
  l.arena_offset =
      AlignUp(l.completion_offset + uint64_t{completion_capacity} * sizeof(CompletionSlot));
  l.total_bytes = l.arena_offset + AlignUp(arena_bytes);
  return l;
}

// Writes a fresh segment header at `base` (a zeroed mapping of
// ComputeLayout(...).total_bytes) for rings of the given capacities, an arena
// of `arena_bytes` and, at its end, a result area of `result_bytes` (both
// rounded up to kAlignment; the result area at most the arena). Clients (and
// tests standing in for one) make their segments with it.
inline SegmentHeader* InitSegmentHeader(void* base, uint32_t submit_capacity,
                                        uint32_t completion_capacity, uint64_t arena_bytes,
                                        uint64_t result_bytes) {
  const Layout layout = ComputeLayout(submit_capacity, completion_capacity, arena_bytes);
  auto* h = new (base) SegmentHeader();
  h->magic = kMagic;
  h->version = kVersion;
  h->header_bytes = sizeof(SegmentHeader);
  h->submit_capacity = submit_capacity;
  h->completion_capacity = completion_capacity;
  h->submit_offset = layout.submit_offset;
  h->completion_offset = layout.completion_offset;
  h->arena_offset = layout.arena_offset;
  h->arena_bytes = AlignUp(arena_bytes);
  h->total_bytes = layout.total_bytes;
  h->result_bytes = AlignUp(result_bytes) < h->arena_bytes ? AlignUp(result_bytes) : h->arena_bytes;
  return h;
}

// An alltoall's result tensor, as kolod writes it into the result area: the
// rows received from each of the process set's `ranks` ranks (int64 each),
// padded to 64 bytes, then those rows in rank order.
inline constexpr uint64_t AlltoallResultHeaderBytes(uint64_t ranks) {
  return (ranks * sizeof(int64_t) + 63) & ~uint64_t{63};
}

}  // namespace kolo::abi::v1
