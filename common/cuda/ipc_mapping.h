// IpcMemoryMapping: another process's device allocation mapped into kolod
// (cudaIpcOpenMemHandle), closed on destruction. IpcMappingCache: the
// mappings and opened events of one session, kept while the session lives
// and used (SweepIdle closes the ones left unused).
//
// Thread-safety: IpcMemoryMapping is thread-compatible (immutable once
// open); IpcMappingCache is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cuda/cuda_resources.h"
#include "common/cuda/device_tensor.h"
#include "common/cuda/handle_cache.h"

namespace kolo::cuda {

class IpcMemoryMapping {
 public:
  // Maps the allocation named by `handle` on the current device (peer access
  // enabled lazily when it lives on another GPU) and reads its size.
  static absl::StatusOr<IpcMemoryMapping> Open(const IpcHandleBytes& handle);

  IpcMemoryMapping(IpcMemoryMapping&& other) noexcept
      : base_(std::exchange(other.base_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        device_(other.device_) {}
  IpcMemoryMapping& operator=(IpcMemoryMapping&& other) noexcept;
  IpcMemoryMapping(const IpcMemoryMapping&) = delete;
  IpcMemoryMapping& operator=(const IpcMemoryMapping&) = delete;
  ~IpcMemoryMapping();

  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }

  // base + offset, after checking that [offset, offset + bytes) lies in the
  // allocation and that the address is aligned to `alignment` (the element
  // size). The values come from a client: errors are INVALID_ARGUMENT.
  absl::StatusOr<uint8_t*> Resolve(uint64_t offset, uint64_t bytes, size_t alignment) const;

 private:
  IpcMemoryMapping(uint8_t* base, uint64_t size, int device)
      : base_(base), size_(size), device_(device) {}
  // Closes the mapping on the device it was opened on (whichever thread
  // drops it last, with whichever device current).
  void Close();
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  int device_ = 0;
};

// One session's opened IPC objects. Created when the session first sends a
// device tensor; dropped by the session teardown hook, after which each
// object closes when the last collective using it ends.
class IpcMappingCache {
 public:
  explicit IpcMappingCache(size_t max_entries = 4096);

  absl::StatusOr<std::shared_ptr<const IpcMemoryMapping>> Memory(const IpcHandleBytes& handle) {
    return memory_.Get(handle);
  }
  absl::StatusOr<std::shared_ptr<const CudaEvent>> Event(const IpcHandleBytes& handle) {
    return events_.Get(handle);
  }
  void Clear() {
    memory_.Clear();
    events_.Clear();
  }
  size_t size() const { return memory_.size() + events_.size(); }

  // Closes the mappings and events no collective holds that went unused for
  // `idle` (so memory a rank freed is released), looking at most once per
  // `every`; returns how many closed.
  size_t SweepIdle(absl::Time now, absl::Duration idle, absl::Duration every) {
    {
      absl::MutexLock lock(&sweep_mu_);
      if (now < next_sweep_) return 0;
      next_sweep_ = now + every;
    }
    return memory_.EvictUnusedSince(now - idle) + events_.EvictUnusedSince(now - idle);
  }

 private:
  HandleCache<IpcMemoryMapping> memory_;
  HandleCache<CudaEvent> events_;
  absl::Mutex sweep_mu_;
  absl::Time next_sweep_ ABSL_GUARDED_BY(sweep_mu_) = absl::InfinitePast();
};

}  // namespace kolo::cuda
