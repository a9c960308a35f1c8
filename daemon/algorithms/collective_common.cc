#include "daemon/algorithms/collective_common.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "kernels/cpu/reduce.h"

namespace kolo::daemon {

absl::Status CheckCollectiveArgs(const Transport& transport, const char* what, const void* buffer,
                                 size_t bytes, uint64_t tag_base, size_t chunk_bytes) {
  if ((tag_base & kCollectiveTagMask) != 0 || tag_base >= kTransportTagLimit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s on node %d: tag base %#x must have its low %d bits zero and be "
                        "below 2^%d",
                        what, transport.node(), tag_base, kCollectiveTagBits, kTransportTagBits));
  }
  if (bytes > 0 && buffer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s on node %d: null buffer for %d bytes", what, transport.node(), bytes));
  }
  if (chunk_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s on node %d: chunk size 0", what, transport.node()));
  }
  return absl::OkStatus();
}

absl::Status CheckReduction(const Transport& transport, const char* what, DType dtype,
                            ReduceOp op) {
  if (DTypeSize(dtype) == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s on node %d: invalid dtype %d", what, transport.node(), static_cast<uint32_t>(dtype)));
  }
  if (op != ReduceOp::kSum && op != ReduceOp::kMin && op != ReduceOp::kMax &&
      op != ReduceOp::kProduct) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s on node %d: op %s is not one of sum, min, max, product", what,
                        transport.node(), ReduceOpName(op)));
  }
  return absl::OkStatus();
}

absl::Status ReduceOnOneNode(void* buffer, size_t count, DType dtype, ReduceOp op) {
  return ReduceOnOneNode(PiecedBuffer(buffer, count * DTypeSize(dtype)), dtype, op, 1.0);
}

absl::Status ReduceOnOneNode(const PiecedBuffer& buffer, DType dtype, ReduceOp op,
                             double postscale) {
  const size_t esize = DTypeSize(dtype);
  for (size_t i = 0; i < buffer.piece_count(); ++i) {
    const BufferPiece& p = buffer.piece(i);
    const void* srcs[] = {p.data};
    void* dsts[] = {p.data};
    if (absl::Status s = kernels::Reduce(dtype, op, srcs, dsts, p.bytes / esize, 1.0, postscale);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

PendingTransfers::~PendingTransfers() {
  if (outstanding_.empty()) return;
  // Cancels and retires them; the status is the failure already reported.
  transport_.Wait(outstanding_, absl::InfinitePast()).IgnoreError();
}

absl::StatusOr<Transport::Ticket> PendingTransfers::Send(int peer, uint64_t tag, const void* data,
                                                         size_t bytes) {
  absl::StatusOr<Transport::Ticket> t = transport_.PostSend(peer, tag, data, bytes);
  if (t.ok()) outstanding_.push_back(*t);
  return t;
}

absl::StatusOr<Transport::Ticket> PendingTransfers::Recv(int peer, uint64_t tag, void* data,
                                                         size_t bytes) {
  absl::StatusOr<Transport::Ticket> t = transport_.PostRecv(peer, tag, data, bytes);
  if (t.ok()) outstanding_.push_back(*t);
  return t;
}

absl::Status PendingTransfers::Wait(absl::Span<const Transport::Ticket> tickets) {
  absl::Status s = transport_.Wait(tickets, deadline_);
  Forget(tickets);  // retired either way
  return s;
}

void PendingTransfers::Forget(absl::Span<const Transport::Ticket> tickets) {
  for (Transport::Ticket t : tickets) {
    auto it = std::find(outstanding_.begin(), outstanding_.end(), t);
    if (it != outstanding_.end()) outstanding_.erase(it);
  }
}

}  // namespace kolo::daemon
