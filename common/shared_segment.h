// SharedSegment: a mapping of a session's shared-memory segment.
//
// The client creates the segment as a memfd sealed against shrinking and
// growing, so the daemon, which maps it too, can never be made to fault by a
// client truncating it. kolod receives the descriptor itself over a Unix
// socket (see common/handoff.h) and checks that it is such a memfd before
// mapping it.
//
// Thread-safety: a move-only value; the mapping itself may be read and
// written from any thread (synchronisation is the rings' business).
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace kolo {

class SharedSegment {
 public:
  // Creates and maps a sealed memfd of `bytes` (zero-filled, sparse).
  static absl::StatusOr<SharedSegment> Create(uint64_t bytes);
  // Maps `fd`, which Inspect accepted, expecting exactly `expected_bytes`.
  static absl::StatusOr<SharedSegment> Adopt(UniqueFd fd, uint64_t expected_bytes);

  struct FdFacts {
    uint64_t bytes = 0;
    uid_t owner = 0;
  };
  // Checks that `fd` is a memfd open for reading and writing and sealed
  // against shrinking, growing and further sealing; anything else (a pipe, a
  // terminal, a plain file) is INVALID_ARGUMENT. Never blocks.
  static absl::StatusOr<FdFacts> Inspect(int fd);

  SharedSegment() = default;
  SharedSegment(SharedSegment&& o) noexcept;
  SharedSegment& operator=(SharedSegment&& o) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  ~SharedSegment();

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_.get(); }

 private:
  SharedSegment(UniqueFd fd, uint8_t* data, uint64_t size)
      : fd_(std::move(fd)), data_(data), size_(size) {}
  void Unmap();

  UniqueFd fd_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace kolo
