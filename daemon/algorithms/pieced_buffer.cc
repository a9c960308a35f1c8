#include "daemon/algorithms/pieced_buffer.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_format.h"

namespace kolo::daemon {

PiecedBuffer::PiecedBuffer(const std::vector<BufferPiece>& pieces) {
  for (const BufferPiece& p : pieces) {
    if (p.bytes == 0) continue;
    pieces_.push_back(p);
    starts_.push_back(total_);
    total_ += p.bytes;
  }
}

PiecedBuffer::PiecedBuffer(void* data, size_t bytes)
    : PiecedBuffer(std::vector<BufferPiece>{{static_cast<std::byte*>(data), bytes}}) {}

absl::Status PiecedBuffer::Check(const char* what, int node, size_t element_size) const {
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const BufferPiece& p = pieces_[i];
    if (p.data == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s on node %d: null buffer for %d bytes", what, node, p.bytes));
    }
    if (element_size > 0 &&
        (p.bytes % element_size != 0 || reinterpret_cast<uintptr_t>(p.data) % element_size != 0)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s on node %d: buffer piece %d (%d bytes) is not whole, aligned "
                          "elements of %d bytes",
                          what, node, i, p.bytes, element_size));
    }
  }
  return absl::OkStatus();
}

size_t PiecedBuffer::PieceAt(size_t offset) const {
  // The last piece starting at or before `offset`.
  return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) -
                             starts_.begin()) -
         1;
}

std::byte* PiecedBuffer::Contiguous(size_t offset, size_t len) const {
  if (pieces_.empty()) return nullptr;
  const size_t i = PieceAt(offset);
  const size_t in_piece = offset - starts_[i];
  return in_piece + len <= pieces_[i].bytes ? pieces_[i].data + in_piece : nullptr;
}

void PiecedBuffer::Gather(size_t offset, size_t len, std::byte* to) const {
  ForEachPart(offset, len, [to](std::byte* part, size_t n, size_t at) {
    std::memcpy(to + at, part, n);
    return absl::OkStatus();
  }).IgnoreError();  // the callback cannot fail
}

void PiecedBuffer::Scatter(size_t offset, size_t len, const std::byte* from) const {
  ForEachPart(offset, len, [from](std::byte* part, size_t n, size_t at) {
    std::memcpy(part, from + at, n);
    return absl::OkStatus();
  }).IgnoreError();  // the callback cannot fail
}

}  // namespace kolo::daemon
