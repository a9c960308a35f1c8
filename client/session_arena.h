// HostBuffer::Arena: the session arena as HostBuffer sees it — the client's
// allocator over the front of the shared-memory mapping, and the hand-back
// of results kolod placed at its end.
//
// Thread-safety: thread-safe; `mu` guards the allocator and the hand-back.
// It is the innermost lock: nothing else is taken while it is held.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/arena_allocator.h"
#include "common/shared_segment.h"
#include "kolo/kolo.h"

namespace kolo {

struct HostBuffer::Arena {
  Arena(std::shared_ptr<const SharedSegment> seg, uint8_t* b, uint64_t bytes, uint64_t client_bytes)
      : segment(std::move(seg)), base(b), size(bytes), alloc(client_bytes, 64) {}
  // The mapping the arena lies in: every HostBuffer holds the Arena, so its
  // memory stays mapped in this process after the Client is gone (a
  // framework tensor viewing it cannot dangle).
  const std::shared_ptr<const SharedSegment> segment;
  uint8_t* const base;
  const uint64_t size;  // the whole arena, result area included
  absl::Mutex mu;
  ArenaAllocator alloc ABSL_GUARDED_BY(mu);
  // Hands a result back to kolod; cleared when the client goes away.
  std::function<void(uint64_t)> release_result ABSL_GUARDED_BY(mu);

  bool Contains(const void* p, uint64_t bytes) const {
    auto* b = static_cast<const uint8_t*>(p);
    return b >= base && b <= base + size && bytes <= static_cast<uint64_t>(base + size - b);
  }
  void ReleaseResult(uint64_t offset) {
    std::function<void(uint64_t)> release;
    {
      absl::MutexLock l(&mu);
      release = release_result;
    }
    if (release) release(offset);
  }
};

// A HostBuffer over `bytes` at `data` in `arena` (a result kolod placed
// when `result_offset` >= 0). HostBuffer's constructor is private to its
// friends (kolo.h): this is defined with ClientImpl, in client_impl.cc.
HostBuffer MakeHostBuffer(std::shared_ptr<HostBuffer::Arena> arena, void* data, uint64_t bytes,
                          DType dtype, std::vector<int64_t> shape, int64_t result_offset = -1);

}  // namespace kolo
