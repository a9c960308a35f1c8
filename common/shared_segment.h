// SharedSegment: a mapping of a session's shared-memory segment.
//
// The client creates the segment as a memfd sealed against shrinking and
// growing, so the daemon, which maps it too, can never be made to fault by a
// client truncating it. kolod opens it through /proc/PID/fd/FD, which only a
// process allowed to inspect the client can do, and checks the seals.
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
  // Opens and maps process `pid`'s fd `fd`; it must be a sealed memfd of
  // exactly `expected_bytes`. Fills `owner_uid` with the segment's owner.
  static absl::StatusOr<SharedSegment> OpenFromProcess(pid_t pid, int fd, uint64_t expected_bytes,
                                                       uid_t* owner_uid);

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
