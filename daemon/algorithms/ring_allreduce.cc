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
// The buffer may be pieced (the tensors of a fused response, in place): a
// chunk within one piece moves straight from / into it, a chunk across
// pieces is gathered into a send slot or received into a scratch slot and
// scattered. The last reduce-scatter step applies the postscale as it
// reduces, so the scaled values are what the allgather copies.
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
#include "daemon/algorithms/pieced_buffer.h"
#include "kernels/cpu/reduce.h"

namespace kolo::daemon {
namespace {

constexpr size_t kWindow = 3;

struct RingStep {
  CollectivePhase phase;
  size_t send_begin = 0;  // element range of the segment sent to the right
  size_t send_count = 0;
  size_t recv_begin = 0;  // element range of the segment received from the left
  size_t recv_count = 0;
  bool reduce = false;     // reduce into it (through scratch) or overwrite
  double postscale = 1.0;  // applied by this step's reductions
};

class Ring {
 public:
  // `scratch` holds kWindow receive slots, then (for a pieced buffer)
  // kWindow send slots, of chunk_elems elements each.
  Ring(Transport& transport, const PiecedBuffer& buffer, DType dtype, ReduceOp op,
       uint64_t tag_base, size_t chunk_elems, std::byte* scratch, PendingTransfers& pending)
      : right_((transport.node() + 1) % transport.nodes()),
        left_((transport.node() + transport.nodes() - 1) % transport.nodes()),
        buffer_(buffer),
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
        const size_t at = Offset(step.recv_begin, next_recv);
        const size_t len = ChunkSize(step.recv_count, next_recv) * esize_;
        std::byte* into = step.reduce ? nullptr : buffer_.Contiguous(at, len);
        if (into == nullptr) into = RecvSlot(next_recv);
        KOLO_ASSIGN_OR_RETURN(
            Transport::Ticket t,
            pending_.Recv(left_, MessageTag(tag_base_, step.phase, recv_seq_++), into, len));
        recvs.push_back(t);
      }
      for (; next_send < send_chunks && next_send - done_send < kWindow; ++next_send) {
        const size_t at = Offset(step.send_begin, next_send);
        const size_t len = ChunkSize(step.send_count, next_send) * esize_;
        std::byte* from = buffer_.Contiguous(at, len);
        if (from == nullptr) {
          from = SendSlot(next_send);
          buffer_.Gather(at, len, from);
        }
        KOLO_ASSIGN_OR_RETURN(
            Transport::Ticket t,
            pending_.Send(right_, MessageTag(tag_base_, step.phase, send_seq_++), from, len));
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
        KOLO_RETURN_IF_ERROR(Received(step, done_recv));
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
  // Chunk `chunk` of the receiving segment arrived: reduce it in (received
  // partial first, own data second), or scatter it where it straddles
  // pieces.
  absl::Status Received(const RingStep& step, size_t chunk) {
    const size_t at = Offset(step.recv_begin, chunk);
    const size_t len = ChunkSize(step.recv_count, chunk) * esize_;
    const std::byte* slot = RecvSlot(chunk);
    if (!step.reduce) {
      if (buffer_.Contiguous(at, len) == nullptr) buffer_.Scatter(at, len, slot);
      return absl::OkStatus();
    }
    return buffer_.ForEachPart(at, len, [&](std::byte* part, size_t bytes, size_t from) {
      const void* srcs[2] = {slot + from, part};
      void* dsts[1] = {part};
      return kernels::Reduce(dtype_, op_, srcs, dsts, bytes / esize_, 1.0, step.postscale);
    });
  }

  size_t Chunks(size_t count) const { return (count + chunk_elems_ - 1) / chunk_elems_; }
  size_t ChunkSize(size_t count, size_t chunk) const {
    return std::min(chunk_elems_, count - chunk * chunk_elems_);
  }
  size_t Offset(size_t begin, size_t chunk) const {
    return (begin + chunk * chunk_elems_) * esize_;
  }
  std::byte* RecvSlot(size_t chunk) const {
    return scratch_ + (chunk % kWindow) * chunk_elems_ * esize_;
  }
  std::byte* SendSlot(size_t chunk) const {
    return scratch_ + (kWindow + chunk % kWindow) * chunk_elems_ * esize_;
  }

  const int right_, left_;
  const PiecedBuffer& buffer_;
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

absl::Status RingAllreduce(Transport& transport, const PiecedBuffer& buffer, DType dtype,
                           ReduceOp op, double postscale, uint64_t tag_base, absl::Time deadline,
                           size_t chunk_bytes) {
  KOLO_RETURN_IF_ERROR(CheckReduction(transport, "ring allreduce", dtype, op));
  const size_t esize = DTypeSize(dtype);
  KOLO_RETURN_IF_ERROR(buffer.Check("ring allreduce", transport.node(), esize));
  // (Check has vetted the pieces' addresses.)
  KOLO_RETURN_IF_ERROR(
      CheckCollectiveArgs(transport, "ring allreduce", nullptr, 0, tag_base, chunk_bytes));
  const size_t n = transport.nodes();
  const size_t r = transport.node();
  const size_t count = buffer.bytes() / esize;
  if (n == 1) return ReduceOnOneNode(buffer, dtype, op, postscale);
  if (count == 0) return absl::OkStatus();

  // Scratch for kWindow chunks (twice that for a pieced buffer), no larger
  // than the largest segment needs.
  const size_t chunk_elems =
      std::min(ChunkElements(chunk_bytes, esize), SplitEvenly(count, n, 0).size);
  const size_t slots = buffer.piece_count() > 1 ? 2 * kWindow : kWindow;
  auto scratch = std::make_unique<std::byte[]>(slots * chunk_elems * esize);
  PendingTransfers pending(transport, deadline);  // after `scratch`
  Ring ring(transport, buffer, dtype, op, tag_base, chunk_elems, scratch.get(), pending);
  auto seg = [&](size_t i) { return SplitEvenly(count, n, i % n); };

  for (size_t s = 0; s + 1 < n; ++s) {
    const Segment out = seg(r + n - s), in = seg(r + 2 * n - s - 1);
    KOLO_RETURN_IF_ERROR(ring.Run(RingStep{.phase = CollectivePhase::kRingReduceScatter,
                                           .send_begin = out.begin,
                                           .send_count = out.size,
                                           .recv_begin = in.begin,
                                           .recv_count = in.size,
                                           .reduce = true,
                                           .postscale = s + 2 == n ? postscale : 1.0}));
  }
  for (size_t s = 0; s + 1 < n; ++s) {
    const Segment out = seg(r + 1 + n - s), in = seg(r + n - s);
    KOLO_RETURN_IF_ERROR(ring.Run(RingStep{.phase = CollectivePhase::kRingAllgather,
                                           .send_begin = out.begin,
                                           .send_count = out.size,
                                           .recv_begin = in.begin,
                                           .recv_count = in.size,
                                           .reduce = false}));
  }
  return absl::OkStatus();
}

absl::Status RingAllreduce(Transport& transport, void* buffer, size_t count, DType dtype,
                           ReduceOp op, uint64_t tag_base, absl::Time deadline,
                           size_t chunk_bytes) {
  // (The pieced form checks the arguments, a null buffer included.)
  return RingAllreduce(transport, PiecedBuffer(buffer, count * DTypeSize(dtype)), dtype, op, 1.0,
                       tag_base, deadline, chunk_bytes);
}

}  // namespace kolo::daemon
