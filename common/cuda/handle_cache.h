// HandleCache: opened CUDA IPC objects of one session, keyed by the bytes of
// their handle. Opening an IPC handle costs a driver round trip and a handle
// may be opened only once per process, so each handle is opened on first use
// and kept until the session ends (or it is evicted while unused).
//
// An opener that returns ALREADY_EXISTS says an open entry stands in its way;
// the cache then closes the entries nobody holds and opens once more.
//
// Entries nobody has used for a while can be closed (EvictUnusedSince): a
// rank that frees device memory does not tell kolod, whose mapping would
// otherwise keep that memory allocated for the session's life.
//
// Values are handed out as shared_ptr: a collective holds what it uses, so
// eviction or Clear() while it runs closes nothing under it — the last
// holder closes the object.
//
// Thread-safety: thread-safe (one mutex; opening happens under it, so a
// handle is never opened twice).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cuda/device_tensor.h"

namespace kolo::cuda {

template <typename Value>
class HandleCache {
 public:
  using Opener = std::function<absl::StatusOr<Value>(const IpcHandleBytes&)>;

  // At most `max_entries` are kept: past that, entries nobody holds are
  // closed to make room (entries in use are never closed, so the cache may
  // exceed the bound while a collective holds many).
  HandleCache(Opener open, size_t max_entries) : open_(std::move(open)), max_(max_entries) {}
  HandleCache(const HandleCache&) = delete;
  HandleCache& operator=(const HandleCache&) = delete;

  absl::StatusOr<std::shared_ptr<const Value>> Get(const IpcHandleBytes& handle,
                                                   absl::Time now = absl::Now()) {
    absl::MutexLock lock(&mu_);
    if (auto it = entries_.find(handle); it != entries_.end()) {
      it->second.last_used = now;
      return it->second.value;
    }
    if (entries_.size() >= max_) EvictLocked(absl::InfiniteFuture());
    absl::StatusOr<std::shared_ptr<const Value>> value = Open(handle);
    if (value.status().code() == absl::StatusCode::kAlreadyExists) {
      // The opener says an open entry blocks this one (a CUDA IPC mapping of
      // memory its exporter freed and reallocated at the same address):
      // close the unused entries and try once more.
      EvictLocked(absl::InfiniteFuture());
      value = Open(handle);
    }
    if (!value.ok()) return value.status();
    entries_.emplace(handle, Entry{*value, now});
    return value;
  }

  size_t size() const {
    absl::MutexLock lock(&mu_);
    return entries_.size();
  }

  // Closes the entries nobody holds that were last used before `cutoff`
  // (a mapping of memory the exporter has freed keeps that memory
  // allocated until it closes); returns how many.
  size_t EvictUnusedSince(absl::Time cutoff) {
    absl::MutexLock lock(&mu_);
    return EvictLocked(cutoff);
  }

  // Drops every entry; each closes when its last holder lets go.
  void Clear() {
    absl::flat_hash_map<IpcHandleBytes, Entry> dropped;
    {
      absl::MutexLock lock(&mu_);
      dropped.swap(entries_);
    }
    // `dropped` closes the unheld values here, outside the lock.
  }

 private:
  struct Entry {
    std::shared_ptr<const Value> value;
    absl::Time last_used;
  };

  absl::StatusOr<std::shared_ptr<const Value>> Open(const IpcHandleBytes& handle) {
    absl::StatusOr<Value> opened = open_(handle);
    if (!opened.ok()) return opened.status();
    return std::make_shared<const Value>(std::move(*opened));
  }

  // Closes the unheld entries last used before `cutoff`.
  size_t EvictLocked(absl::Time cutoff) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    size_t closed = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.value.use_count() == 1 && it->second.last_used < cutoff) {
        entries_.erase(it++);
        ++closed;
      } else {
        ++it;
      }
    }
    return closed;
  }

  const Opener open_;
  const size_t max_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<IpcHandleBytes, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kolo::cuda
