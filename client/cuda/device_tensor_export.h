// SDK side of device tensors: turns a rank's device pointer into the
// DeviceTensorRef kolod understands, and manages the interprocess events
// that order the rank's stream with kolod's.
//
// A CUDA IPC memory handle names a whole allocation, so Export finds the
// allocation that contains the pointer (cuMemGetAddressRange), exports the
// handle of its base and sends the pointer's offset in it. Handles are cached
// per allocation base and checked against the driver's buffer id, so a new
// allocation at a freed one's address is exported afresh; Forget drops an
// allocation's entry early.
//
// Per request the SDK takes an EventPair from the pool: `ready` is recorded
// on the producer's stream before the request is submitted (kolod's stream
// waits on it), `done` is recorded by kolod after the output is written (the
// consumer's stream waits on it after Wait returns). A pair returns to the
// pool only after its request completed.
//
// Thread-safety: DeviceTensorExporter and EventPool are thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/cuda/cuda_resources.h"
#include "common/cuda/device_tensor.h"

namespace kolo::client::cuda {

using kolo::cuda::DeviceTensorRef;
using kolo::cuda::IpcHandleBytes;

// The two interprocess events of one in-flight device request.
struct EventPair {
  kolo::cuda::CudaEvent ready;
  kolo::cuda::CudaEvent done;
  IpcHandleBytes ready_handle{};
  IpcHandleBytes done_handle{};
};

class EventPool {
 public:
  // A pair created on the current device (interprocess, timing disabled),
  // reused from the pool when one is free.
  absl::StatusOr<std::unique_ptr<EventPair>> Acquire();
  // Returns a pair whose request has completed.
  void Release(std::unique_ptr<EventPair> pair);
  size_t free_pairs() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<EventPair>> free_ ABSL_GUARDED_BY(mu_);
};

// Records `pair.ready` on `producer`: everything the stream has enqueued so
// far (the kernels that computed the tensor) happens before kolod reads.
absl::Status RecordReady(const EventPair& pair, cudaStream_t producer);
// Makes `consumer` wait for kolod's writes to the output.
absl::Status WaitDone(const EventPair& pair, cudaStream_t consumer);

class DeviceTensorExporter {
 public:
  // The reference for `bytes` at `ptr` (device memory from cudaMalloc; not
  // managed or host memory, which CUDA IPC cannot share), with `event` as
  // its event handle. INVALID_ARGUMENT if the pointer is not such memory or
  // the tensor runs past its allocation.
  absl::StatusOr<DeviceTensorRef> Export(const void* ptr, uint64_t bytes,
                                         const IpcHandleBytes& event);
  // Drops the cached handle of the allocation containing `ptr` (call before
  // freeing it if the address may be reused by a new allocation).
  void Forget(const void* ptr);
  size_t cached_allocations() const;

 private:
  struct Exported {
    uint64_t size = 0;
    uint64_t buffer_id = 0;
    IpcHandleBytes handle{};
    int device = -1;
  };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Exported> by_base_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kolo::client::cuda
