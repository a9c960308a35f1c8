// Ring allreduce.
//
// Protocol, for n nodes, node r, right = r+1 and left = r-1 (mod n); the
// buffer is split into n segments differing by at most one element:
//   1. Reduce-scatter, steps s = 0 .. n-2: send segment (r - s) to the right;
//      receive segment (r - s - 1) from the left into scratch and reduce it
//      into the buffer (received partial first, own data second). After step
//      n-2, node r holds segment (r + 1) fully reduced, combined in ring order
//      starting at node r + 1 (that node's data is the leftmost operand).
//   2. Allgather, steps s = 0 .. n-2: send segment (r + 1 - s) to the right;
//      receive segment (r - s) from the left straight into the buffer. The
//      reduced segments are copied verbatim, so all nodes end bit-identical.
// Within a step, each segment moves in chunks with up to kWindow chunks in
// flight per direction. A step sends a segment no one writes during that
// step, and a chunk's scratch slot is reused only after it was reduced.
// Message indices (see collective_common.h) count the chunks a node sends to
// its right / receives from its left, over both phases, so sender and
// receiver number every chunk alike.

#include <algorithm>
#include <cstddef>
#include <deque>
#include <memory>

#include "common/status_macros.h"
#include "daemon/algorithms/allreduce.h"
#include "daemon/algorithms/collective_common.h"
#include "kernels/cpu/reduce.h"

namespace kolo::daemon {
namespace {

constexpr size_t kWindow = 3;

struct RingStep {
  CollectivePhase phase;
  std::byte* send = nullptr;  // segment sent to the right
  size_t send_count = 0;
  std::byte* recv = nullptr;  // segment received from the left
  size_t recv_count = 0;
  bool reduce = false;  // reduce into `recv` (through scratch) or overwrite
};

class Ring {
 public:
  Ring(Transport& transport, DType dtype, ReduceOp op, uint64_t tag_base, size_t chunk_elems,
       std::byte* scratch, PendingTransfers& pending)
      : right_((transport.node() + 1) % transport.nodes()),
        left_((transport.node() + transport.nodes() - 1) % transport.nodes()),
        dtype_(dtype),
        op_(op),
        esize_(DTypeSize(dtype)),
        tag_base_(tag_base),
        chunk_elems_(chunk_elems),
        scratch_(scratch),
        pending_(pending) {}

  absl::Status Run(const RingStep& step) {
    const size_t send_chunks = Chunks(step.send_count);
    const size_t recv_chunks = Chunks(step.recv_count);
    std::deque<Transport::Ticket> sends, recvs;
    size_t next_send = 0, next_recv = 0, done_send = 0, done_recv = 0;
    // Each pass completes at least one chunk, so this ends after at most
    // send_chunks + recv_chunks passes.
    while (done_send < send_chunks || done_recv < recv_chunks) {
      for (; next_recv < recv_chunks && next_recv - done_recv < kWindow; ++next_recv) {
        const size_t elems = ChunkSize(step.recv_count, next_recv);
        std::byte* into =
            step.reduce ? Slot(next_recv) : step.recv + next_recv * chunk_elems_ * esize_;
        KOLO_ASSIGN_OR_RETURN(Transport::Ticket t,
                              pending_.Recv(left_, MessageTag(tag_base_, step.phase, recv_seq_++),
                                            into, elems * esize_));
        recvs.push_back(t);
      }
      for (; next_send < send_chunks && next_send - done_send < kWindow; ++next_send) {
        const size_t elems = ChunkSize(step.send_count, next_send);
        KOLO_ASSIGN_OR_RETURN(
            Transport::Ticket t,
            pending_.Send(right_, MessageTag(tag_base_, step.phase, send_seq_++),
                          step.send + next_send * chunk_elems_ * esize_, elems * esize_));
        sends.push_back(t);
      }
      Transport::Ticket batch[2];
      size_t n = 0;
      const bool recv_ready = done_recv < next_recv;
      const bool send_ready = done_send < next_send;
      if (recv_ready) batch[n++] = recvs.front();
      if (send_ready) batch[n++] = sends.front();
      KOLO_RETURN_IF_ERROR(pending_.Wait(absl::MakeConstSpan(batch, n)));
      if (recv_ready) {
        recvs.pop_front();
        if (step.reduce) {
          std::byte* dst = step.recv + done_recv * chunk_elems_ * esize_;
          const void* srcs[2] = {Slot(done_recv), dst};
          void* dsts[1] = {dst};
          KOLO_RETURN_IF_ERROR(
              kernels::Reduce(dtype_, op_, srcs, dsts, ChunkSize(step.recv_count, done_recv)));
        }
        ++done_recv;
      }
      if (send_ready) {
        sends.pop_front();
        ++done_send;
      }
    }
    return absl::OkStatus();
  }

 private:
  size_t Chunks(size_t count) const { return (count + chunk_elems_ - 1) / chunk_elems_; }
  size_t ChunkSize(size_t count, size_t chunk) const {
    return std::min(chunk_elems_, count - chunk * chunk_elems_);
  }
  std::byte* Slot(size_t chunk) const {
    return scratch_ + (chunk % kWindow) * chunk_elems_ * esize_;
  }

  const int right_, left_;
  const DType dtype_;
  const ReduceOp op_;
  const size_t esize_;
  const uint64_t tag_base_;
  const size_t chunk_elems_;
  std::byte* const scratch_;
  PendingTransfers& pending_;
  uint64_t send_seq_ = 0, recv_seq_ = 0;
};

}  // namespace

absl::Status RingAllreduce(Transport& transport, void* buffer, size_t count, DType dtype,
                           ReduceOp op, uint64_t tag_base, absl::Time deadline,
                           size_t chunk_bytes) {
  KOLO_RETURN_IF_ERROR(CheckReduction(transport, "ring allreduce", dtype, op));
  const size_t esize = DTypeSize(dtype);
  KOLO_RETURN_IF_ERROR(CheckCollectiveArgs(transport, "ring allreduce", buffer, count * esize,
                                           tag_base, chunk_bytes));
  const size_t n = transport.nodes();
  const size_t r = transport.node();
  if (n == 1) return ReduceOnOneNode(buffer, count, dtype, op);
  if (count == 0) return absl::OkStatus();

  // Scratch for kWindow chunks, no larger than the largest segment needs.
  const size_t chunk_elems =
      std::min(ChunkElements(chunk_bytes, esize), SplitEvenly(count, n, 0).size);
  auto scratch = std::make_unique<std::byte[]>(kWindow * chunk_elems * esize);
  PendingTransfers pending(transport, deadline);  // after `scratch`
  Ring ring(transport, dtype, op, tag_base, chunk_elems, scratch.get(), pending);
  auto* base = static_cast<std::byte*>(buffer);
  auto seg = [&](size_t i) { return SplitEvenly(count, n, i % n); };

  for (size_t s = 0; s + 1 < n; ++s) {
    const Segment out = seg(r + n - s), in = seg(r + 2 * n - s - 1);
    KOLO_RETURN_IF_ERROR(ring.Run(RingStep{.phase = CollectivePhase::kRingReduceScatter,
                                           .send = base + out.begin * esize,
                                           .send_count = out.size,
                                           .recv = base + in.begin * esize,
                                           .recv_count = in.size,
                                           .reduce = true}));
  }
  for (size_t s = 0; s + 1 < n; ++s) {
    const Segment out = seg(r + 1 + n - s), in = seg(r + n - s);
    KOLO_RETURN_IF_ERROR(ring.Run(RingStep{.phase = CollectivePhase::kRingAllgather,
                                           .send = base + out.begin * esize,
                                           .send_count = out.size,
                                           .recv = base + in.begin * esize,
                                           .recv_count = in.size,
                                           .reduce = false}));
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon
