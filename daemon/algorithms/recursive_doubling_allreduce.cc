// Recursive-doubling allreduce.
//
// Protocol, for n nodes, p the largest power of two <= n, extra = n - p,
// repeated for each chunk of the buffer:
//   1. Fold in: among nodes r < 2*extra, even r sends its chunk to r+1, which
//      reduces it in (r's data first). Odd r < 2*extra then act as virtual
//      node r/2, nodes r >= 2*extra as virtual node r - extra; even
//      r < 2*extra sit out step 2.
//   2. Exchange, for mask = 1, 2, .., p/2: virtual node v swaps its chunk with
//      virtual node v ^ mask; both reduce with the lower real node's data as
//      the left operand, so the pair computes the very same value.
//   3. Fold out: odd r < 2*extra sends the result to r-1.
// By induction every node ends with bit-identical data. Each step waits for
// its send and receive before reducing, so a buffer is never written while a
// send still reads it.

#include <algorithm>
#include <cstddef>
#include <memory>

#include "common/status_macros.h"
#include "daemon/algorithms/allreduce.h"
#include "daemon/algorithms/collective_common.h"
#include "kernels/cpu/reduce.h"

namespace kolo::daemon {
namespace {

// Exchange steps per chunk reserved in the message index (log2 of the node
// count; UCX caps nodes at 2^16).
constexpr uint64_t kMaxSteps = 32;

// Real node index of virtual node `v`.
int RealNode(int v, int extra) { return v < extra ? 2 * v + 1 : v + extra; }

}  // namespace

absl::Status RecursiveDoublingAllreduce(Transport& transport, void* buffer, size_t count,
                                        DType dtype, ReduceOp op, uint64_t tag_base,
                                        absl::Time deadline, size_t chunk_bytes) {
  const char* kWhat = "recursive-doubling allreduce";
  KOLO_RETURN_IF_ERROR(CheckReduction(transport, kWhat, dtype, op));
  const size_t esize = DTypeSize(dtype);
  KOLO_RETURN_IF_ERROR(
      CheckCollectiveArgs(transport, kWhat, buffer, count * esize, tag_base, chunk_bytes));
  const int n = transport.nodes();
  const int r = transport.node();
  if (n == 1) return ReduceOnOneNode(buffer, count, dtype, op);
  if (count == 0) return absl::OkStatus();

  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  const bool folded_away = r < 2 * extra && r % 2 == 0;
  const int v = r < 2 * extra ? r / 2 : r - extra;

  const size_t chunk_elems = std::min(ChunkElements(chunk_bytes, esize), count);
  auto scratch = std::make_unique<std::byte[]>(chunk_elems * esize);
  PendingTransfers pending(transport, deadline);  // after `scratch`
  auto* base = static_cast<std::byte*>(buffer);

  // Receives `bytes` from `peer` into scratch while sending `mine` to it (or
  // only one of the two), then waits for both.
  auto exchange = [&](int peer, uint64_t tag, std::byte* mine, size_t bytes, bool send,
                      bool recv) -> absl::Status {
    Transport::Ticket tickets[2];
    size_t k = 0;
    if (recv) {
      KOLO_ASSIGN_OR_RETURN(tickets[k++], pending.Recv(peer, tag, scratch.get(), bytes));
    }
    if (send) {
      KOLO_ASSIGN_OR_RETURN(tickets[k++], pending.Send(peer, tag, mine, bytes));
    }
    return pending.Wait(absl::MakeConstSpan(tickets, k));
  };
  // mine = lower node's data op higher node's data.
  auto reduce_with = [&](int peer, std::byte* mine, size_t elems) {
    const void* srcs[2];
    srcs[peer < r ? 0 : 1] = scratch.get();
    srcs[peer < r ? 1 : 0] = mine;
    void* dsts[1] = {mine};
    return kernels::Reduce(dtype, op, srcs, dsts, elems);
  };

  const size_t chunks = (count + chunk_elems - 1) / chunk_elems;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t elems = std::min(chunk_elems, count - c * chunk_elems);
    const size_t bytes = elems * esize;
    std::byte* mine = base + c * chunk_elems * esize;

    if (r < 2 * extra) {
      const uint64_t tag = MessageTag(tag_base, CollectivePhase::kDoublingFoldIn, c);
      if (folded_away) {
        KOLO_RETURN_IF_ERROR(exchange(r + 1, tag, mine, bytes, true, false));
      } else {
        KOLO_RETURN_IF_ERROR(exchange(r - 1, tag, mine, bytes, false, true));
        KOLO_RETURN_IF_ERROR(reduce_with(r - 1, mine, elems));
      }
    }
    if (!folded_away) {
      uint64_t step = 0;
      for (int mask = 1; mask < p; mask <<= 1, ++step) {
        const int peer = RealNode(v ^ mask, extra);
        const uint64_t tag =
            MessageTag(tag_base, CollectivePhase::kDoublingExchange, c * kMaxSteps + step);
        KOLO_RETURN_IF_ERROR(exchange(peer, tag, mine, bytes, true, true));
        KOLO_RETURN_IF_ERROR(reduce_with(peer, mine, elems));
      }
    }
    if (r < 2 * extra) {
      const uint64_t tag = MessageTag(tag_base, CollectivePhase::kDoublingFoldOut, c);
      if (folded_away) {
        // Straight into the buffer: no reduction on the way out.
        Transport::Ticket t;
        KOLO_ASSIGN_OR_RETURN(t, pending.Recv(r + 1, tag, mine, bytes));
        KOLO_RETURN_IF_ERROR(pending.Wait({t}));
      } else {
        KOLO_RETURN_IF_ERROR(exchange(r - 1, tag, mine, bytes, true, false));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon
