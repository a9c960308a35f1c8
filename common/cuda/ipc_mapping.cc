#include "common/cuda/ipc_mapping.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/cuda/allocation_range.h"
#include "common/cuda/cuda_status.h"

namespace kolo::cuda {

absl::StatusOr<IpcMemoryMapping> IpcMemoryMapping::Open(const IpcHandleBytes& handle) {
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* base = nullptr;
  int device = 0;
  KOLO_RETURN_IF_CUDA_ERROR(cudaGetDevice(&device), "cudaGetDevice");
  const cudaError_t opened = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
  if (opened == cudaErrorAlreadyMapped) {
    // The exporter freed an allocation this process still maps and got a new
    // one in its place: the old mapping must close first (HandleCache
    // retries after closing the unused ones).
    (void)cudaGetLastError();
    return absl::AlreadyExistsError(
        "cudaIpcOpenMemHandle: a mapping of the exporter's freed allocation at this address is "
        "still open (cudaErrorAlreadyMapped)");
  }
  if (opened != cudaSuccess) {
    // What a host lacks when legacy CUDA IPC cannot map a rank's memory.
    return CudaStatus(opened,
                      "cudaIpcOpenMemHandle (kolod maps a rank's GPU memory through CUDA IPC: "
                      "both processes must see the same GPU and share the host's IPC namespace: "
                      "docker --ipc=host, Kubernetes hostIPC: true for kolod's and the training "
                      "pods)");
  }
  IpcMemoryMapping mapping(static_cast<uint8_t*>(base), 0, device);
  // The mapping's extent bounds every offset a client may send. The mapped
  // range is the exporter's whole allocation.
  absl::StatusOr<AllocationRange> range = FindAllocation(base);
  if (!range.ok()) return range.status();
  mapping.size_ = range->size - (reinterpret_cast<uint64_t>(base) - range->base);
  return mapping;
}

void IpcMemoryMapping::Close() {
  if (base_ == nullptr) return;
  int current = -1;
  const bool switched = cudaGetDevice(&current) == cudaSuccess && current != device_ &&
                        cudaSetDevice(device_) == cudaSuccess;
  cudaIpcCloseMemHandle(base_);
  if (switched) cudaSetDevice(current);
  base_ = nullptr;
}

IpcMemoryMapping& IpcMemoryMapping::operator=(IpcMemoryMapping&& other) noexcept {
  if (this != &other) {
    Close();
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    device_ = other.device_;
  }
  return *this;
}

IpcMemoryMapping::~IpcMemoryMapping() { Close(); }

absl::StatusOr<uint8_t*> IpcMemoryMapping::Resolve(uint64_t offset, uint64_t bytes,
                                                   size_t alignment) const {
  if (offset > size_ || bytes > size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat("device tensor [", offset, ", +", bytes,
                                                   ") lies outside its allocation of ", size_,
                                                   " bytes"));
  }
  uint8_t* p = base_ + offset;
  if (alignment > 1 && reinterpret_cast<uintptr_t>(p) % alignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device tensor at offset ", offset, " is not aligned to its element size ", alignment));
  }
  return p;
}

IpcMappingCache::IpcMappingCache(size_t max_entries)
    : memory_([](const IpcHandleBytes& h) { return IpcMemoryMapping::Open(h); }, max_entries),
      events_([](const IpcHandleBytes& h) { return CudaEvent::OpenIpc(h); }, max_entries) {}

}  // namespace kolo::cuda
