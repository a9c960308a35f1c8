// Pieces shared by Kolo's inter-node collective algorithms: the tag layout,
// argument checks, and PendingTransfers, which makes sure no transfer
// outlives the buffers of the algorithm that posted it.
//
// Thread-safety: free functions are reentrant; a PendingTransfers belongs to
// the one thread running its algorithm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/algorithms/pieced_buffer.h"
#include "daemon/transport/transport.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {

// Tag layout. The caller of a collective passes a `tag_base` whose low 24 bits
// are zero (and which, like every transport tag, is below 2^48); the
// collective owns those 24 bits:
//
//   bits 47..24  tag_base: which collective (chosen by the caller)
//   bits 23..20  phase: one of CollectivePhase
//   bits 19..0   message index on one link within the phase, modulo 2^20
//
// An index wraps only after 2^20 messages on one link, while an algorithm has
// at most a few messages in flight per link, so two transfers in flight
// never share a (peer, tag).
inline constexpr int kCollectiveTagBits = 24;
inline constexpr uint64_t kCollectiveTagMask = (uint64_t{1} << kCollectiveTagBits) - 1;
inline constexpr int kMessageIndexBits = 20;

enum class CollectivePhase : uint64_t {
  kRingReduceScatter = 0,
  kRingAllgather = 1,
  kDoublingFoldIn = 2,
  kDoublingExchange = 3,
  kDoublingFoldOut = 4,
  kTreeBroadcast = 5,
  kRingAllgatherV = 6,
  kAlltoall = 7,
  kAdasumFoldIn = 8,
  kAdasumHalving = 9,
  kAdasumProducts = 10,
  kAdasumDoubling = 11,
  kAdasumFoldOut = 12,
};

inline uint64_t MessageTag(uint64_t tag_base, CollectivePhase phase, uint64_t index) {
  return tag_base | (static_cast<uint64_t>(phase) << kMessageIndexBits) |
         (index & ((uint64_t{1} << kMessageIndexBits) - 1));
}

// Checks what every collective needs: a valid tag base, a non-null buffer
// when there are bytes to move. `what` names the collective in errors.
absl::Status CheckCollectiveArgs(const Transport& transport, const char* what, const void* buffer,
                                 size_t bytes, uint64_t tag_base, size_t chunk_bytes);

// Checks an allreduce's dtype and op (kAverage is the caller's business: it
// reduces with kSum and scales).
absl::Status CheckReduction(const Transport& transport, const char* what, DType dtype, ReduceOp op);

// The allreduce of a single node: its own `count` elements, written as a
// reduction writes them (kernels::Reduce of one source in place). That
// leaves every dtype's bits as they are except bool's, whose bytes become
// 0 or 1 as on more nodes.
absl::Status ReduceOnOneNode(void* buffer, size_t count, DType dtype, ReduceOp op);
// The same over every piece, scaled by `postscale` (1.0 costs nothing).
absl::Status ReduceOnOneNode(const PiecedBuffer& buffer, DType dtype, ReduceOp op,
                             double postscale);

// The transfers an algorithm has posted and not yet waited on. On
// destruction, whatever is still outstanding is cancelled and retired (a Wait
// with a past deadline), so an algorithm that returns early on an error never
// leaves the transport writing into its freed scratch buffers. Declare it
// after those buffers.
class PendingTransfers {
 public:
  PendingTransfers(Transport& transport, absl::Time deadline)
      : transport_(transport), deadline_(deadline) {}
  PendingTransfers(const PendingTransfers&) = delete;
  PendingTransfers& operator=(const PendingTransfers&) = delete;
  ~PendingTransfers();

  absl::StatusOr<Transport::Ticket> Send(int peer, uint64_t tag, const void* data, size_t bytes);
  absl::StatusOr<Transport::Ticket> Recv(int peer, uint64_t tag, void* data, size_t bytes);
  // Waits for `tickets` (all posted through this object) until the deadline.
  absl::Status Wait(absl::Span<const Transport::Ticket> tickets);

 private:
  void Forget(absl::Span<const Transport::Ticket> tickets);

  Transport& transport_;
  const absl::Time deadline_;
  std::vector<Transport::Ticket> outstanding_;
};

// Element range [begin, begin + size) of segment `i` when `count` elements
// are split into `parts` segments that differ in size by at most one.
struct Segment {
  size_t begin = 0;
  size_t size = 0;
};
inline Segment SplitEvenly(size_t count, size_t parts, size_t i) {
  const size_t q = count / parts, rem = count % parts;
  return Segment{i * q + (i < rem ? i : rem), q + (i < rem ? 1 : 0)};
}

// Elements per chunk for a chunk size in bytes (at least one element).
inline size_t ChunkElements(size_t chunk_bytes, size_t element_size) {
  const size_t n = chunk_bytes / element_size;
  return n == 0 ? 1 : n;
}

}  // namespace kolo::daemon
