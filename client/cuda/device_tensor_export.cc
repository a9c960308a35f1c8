#include "client/cuda/device_tensor_export.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cuda/allocation_range.h"
#include "common/cuda/cuda_status.h"

namespace kolo::client::cuda {

using kolo::cuda::CudaEvent;
using kolo::cuda::CudaStatus;

absl::StatusOr<std::unique_ptr<EventPair>> EventPool::Acquire() {
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      std::unique_ptr<EventPair> pair = std::move(free_.back());
      free_.pop_back();
      return pair;
    }
  }
  absl::StatusOr<CudaEvent> ready = CudaEvent::CreateInterprocess();
  if (!ready.ok()) return ready.status();
  absl::StatusOr<CudaEvent> done = CudaEvent::CreateInterprocess();
  if (!done.ok()) return done.status();
  absl::StatusOr<IpcHandleBytes> ready_handle = ready->ExportIpcHandle();
  if (!ready_handle.ok()) return ready_handle.status();
  absl::StatusOr<IpcHandleBytes> done_handle = done->ExportIpcHandle();
  if (!done_handle.ok()) return done_handle.status();
  return std::make_unique<EventPair>(
      EventPair{std::move(*ready), std::move(*done), *ready_handle, *done_handle});
}

void EventPool::Release(std::unique_ptr<EventPair> pair) {
  if (pair == nullptr) return;
  absl::MutexLock lock(&mu_);
  free_.push_back(std::move(pair));
}

size_t EventPool::free_pairs() const {
  absl::MutexLock lock(&mu_);
  return free_.size();
}

absl::Status RecordReady(const EventPair& pair, cudaStream_t producer) {
  return pair.ready.Record(producer);
}

absl::Status WaitDone(const EventPair& pair, cudaStream_t consumer) {
  return CudaStatus(cudaStreamWaitEvent(consumer, pair.done.get(), 0),
                    "cudaStreamWaitEvent on kolod's output event");
}

absl::StatusOr<DeviceTensorRef> DeviceTensorExporter::Export(const void* ptr, uint64_t bytes,
                                                             const IpcHandleBytes& event) {
  cudaPointerAttributes attr;
  if (absl::Status s =
          CudaStatus(cudaPointerGetAttributes(&attr, ptr), "cudaPointerGetAttributes of a tensor");
      !s.ok()) {
    return s;
  }
  if (attr.type != cudaMemoryTypeDevice) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor at 0x", absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
                     " is not device memory from cudaMalloc (memory type ",
                     static_cast<int>(attr.type), "); CUDA IPC cannot share it"));
  }
  absl::StatusOr<kolo::cuda::AllocationRange> range = kolo::cuda::FindAllocation(ptr);
  if (!range.ok()) return range.status();
  const uint64_t offset = reinterpret_cast<uint64_t>(ptr) - range->base;
  if (offset > range->size || bytes > range->size - offset) {
    return absl::InvalidArgumentError(absl::StrCat("tensor of ", bytes, " bytes at offset ", offset,
                                                   " runs past its allocation of ", range->size,
                                                   " bytes"));
  }
  DeviceTensorRef ref;
  ref.offset = offset;
  ref.bytes = bytes;
  ref.event = event;
  absl::MutexLock lock(&mu_);
  auto it = by_base_.find(range->base);
  // A new allocation at a freed one's address gets a new buffer id: its
  // handle is exported afresh (the old handle names the freed memory).
  if (it == by_base_.end() || it->second.size != range->size ||
      it->second.buffer_id != range->buffer_id) {
    cudaIpcMemHandle_t handle;
    if (absl::Status s =
            CudaStatus(cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(range->base)),
                       "cudaIpcGetMemHandle");
        !s.ok()) {
      // Memory mapped through CUDA's virtual memory API (PyTorch's
      // expandable_segments, other VMM allocators) or taken from a
      // cudaMallocAsync pool has no legacy IPC handle.
      return absl::Status(
          s.code(),
          absl::StrCat(s.message(),
                       ": kolod reaches device tensors through legacy CUDA IPC, which only "
                       "memory from cudaMalloc has; memory from CUDA's virtual memory API "
                       "(PyTorch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) or a "
                       "cudaMallocAsync pool cannot be shared this way yet: allocate the tensor "
                       "with cudaMalloc (PyTorch's default allocator) or reduce a host copy"));
    }
    Exported e;
    e.size = range->size;
    e.buffer_id = range->buffer_id;
    e.device = attr.device;
    std::memcpy(e.handle.data(), &handle, sizeof(handle));
    it = by_base_.insert_or_assign(range->base, e).first;
  }
  ref.memory = it->second.handle;
  ref.device = it->second.device;
  return ref;
}

void DeviceTensorExporter::Forget(const void* ptr) {
  absl::StatusOr<kolo::cuda::AllocationRange> range = kolo::cuda::FindAllocation(ptr);
  absl::MutexLock lock(&mu_);
  if (range.ok()) {
    by_base_.erase(range->base);
    return;
  }
  // Already freed: drop whichever cached allocation contained it.
  const uint64_t p = reinterpret_cast<uint64_t>(ptr);
  for (auto it = by_base_.begin(); it != by_base_.end();) {
    if (p >= it->first && p - it->first < it->second.size) {
      by_base_.erase(it++);
    } else {
      ++it;
    }
  }
}

size_t DeviceTensorExporter::cached_allocations() const {
  absl::MutexLock lock(&mu_);
  return by_base_.size();
}

}  // namespace kolo::client::cuda
