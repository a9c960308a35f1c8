// PiecedBuffer: the buffer of a collective made of several pieces of memory
// laid end to end (the tensors of a fused response), so an algorithm can
// work on them in place instead of on a copy packed into one buffer.
//
// Byte offsets address the concatenation of the pieces; pieces of zero
// bytes are dropped. Algorithms move data in chunks: a chunk that lies in
// one piece is sent from and received into that piece directly, and only a
// chunk that straddles pieces passes through a staging slot (Gather /
// Scatter), so a response of large tensors moves almost nothing twice.
//
// Thread-safety: immutable after construction; the memory it names is the
// caller's to guard.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "absl/status/status.h"

namespace kolo::daemon {

struct BufferPiece {
  std::byte* data = nullptr;
  size_t bytes = 0;
};

class PiecedBuffer {
 public:
  explicit PiecedBuffer(const std::vector<BufferPiece>& pieces);
  // One contiguous buffer.
  PiecedBuffer(void* data, size_t bytes);

  size_t bytes() const { return total_; }
  size_t piece_count() const { return pieces_.size(); }
  const BufferPiece& piece(size_t i) const { return pieces_[i]; }

  // Every piece non-null, a whole number of `element_size` elements, and
  // aligned to it; INVALID_ARGUMENT naming `what` otherwise.
  absl::Status Check(const char* what, int node, size_t element_size) const;

  // The address of bytes [offset, offset + len) when one piece holds them
  // all, else nullptr. Requires offset + len <= bytes().
  std::byte* Contiguous(size_t offset, size_t len) const;

  // Calls fn(part, part_bytes, at) for each part of [offset, offset + len)
  // that lies in one piece, in order; `at` is the part's offset within the
  // range. Stops at, and returns, the first error fn returns.
  template <typename Fn>
  absl::Status ForEachPart(size_t offset, size_t len, Fn fn) const {
    size_t i = PieceAt(offset);
    size_t at = 0;
    while (at < len) {
      const size_t in_piece = offset + at - starts_[i];
      const size_t n = std::min(pieces_[i].bytes - in_piece, len - at);
      if (absl::Status s = fn(pieces_[i].data + in_piece, n, at); !s.ok()) return s;
      at += n;
      ++i;
    }
    return absl::OkStatus();
  }

  // Copies bytes [offset, offset + len) to `to` / from `from`.
  void Gather(size_t offset, size_t len, std::byte* to) const;
  void Scatter(size_t offset, size_t len, const std::byte* from) const;

 private:
  // The piece holding byte `offset` (< bytes()).
  size_t PieceAt(size_t offset) const;

  std::vector<BufferPiece> pieces_;
  std::vector<size_t> starts_;  // starts_[i]: offset of pieces_[i]
  size_t total_ = 0;
};

}  // namespace kolo::daemon
