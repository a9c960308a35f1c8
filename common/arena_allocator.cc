#include "common/arena_allocator.h"

#include <iterator>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kolo {

ArenaAllocator::ArenaAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity & ~(alignment - 1)), alignment_(alignment) {
  if (capacity_ > 0) free_[0] = capacity_;
}

absl::StatusOr<uint64_t> ArenaAllocator::Allocate(uint64_t bytes) {
  if (bytes > capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat("tensor of ", bytes,
                                                     " bytes exceeds the session arena of ",
                                                     capacity_, " bytes (raise KOLO_ARENA_BYTES)"));
  }
  uint64_t need = bytes == 0 ? alignment_ : (bytes + alignment_ - 1) & ~(alignment_ - 1);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    uint64_t offset = it->first;
    uint64_t rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_[offset + need] = rest;
    allocated_[offset] = need;
    in_use_ += need;
    return offset;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("session arena full: ", bytes, " bytes requested, ", capacity_ - in_use_, " of ",
                   capacity_, " free but fragmented or in use (raise KOLO_ARENA_BYTES)"));
}

void ArenaAllocator::Free(uint64_t offset) {
  auto a = allocated_.find(offset);
  if (a == allocated_.end()) return;
  uint64_t length = a->second;
  allocated_.erase(a);
  in_use_ -= length;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += length;
      return;
    }
  }
  free_[offset] = length;
}

}  // namespace kolo
