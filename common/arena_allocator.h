// ArenaAllocator: first-fit allocation of byte ranges (offsets) in a fixed
// region, with coalescing of freed neighbours. libkolo uses it to carve host
// tensors out of the session arena; it hands out offsets, not pointers.
//
// Thread-safety: not thread-safe; the owner serialises calls.
#pragma once

#include <cstdint>
#include <map>

#include "absl/status/statusor.h"

namespace kolo {

class ArenaAllocator {
 public:
  // Manages [0, capacity); every offset returned is a multiple of `alignment`
  // (a power of two).
  ArenaAllocator(uint64_t capacity, uint64_t alignment);

  // RESOURCE_EXHAUSTED when no free range is large enough. A request of 0
  // bytes still gets a distinct offset (one aligned unit).
  absl::StatusOr<uint64_t> Allocate(uint64_t bytes);
  // `offset` must come from Allocate and not have been freed.
  void Free(uint64_t offset);

  uint64_t bytes_in_use() const { return in_use_; }
  uint64_t capacity() const { return capacity_; }

 private:
  uint64_t capacity_;
  uint64_t alignment_;
  uint64_t in_use_ = 0;
  std::map<uint64_t, uint64_t> free_;       // offset -> length
  std::map<uint64_t, uint64_t> allocated_;  // offset -> length
};

}  // namespace kolo
