// The allocation that contains a device address: its base and size, from the
// driver's cuMemGetAddressRange and cuPointerGetAttribute. A CUDA IPC handle names a whole
// allocation, so the SDK exports the base and sends the offset, and kolod checks each offset
// against the size of what it mapped.
//
// The driver entry point is looked up through the runtime
// (cudaGetDriverEntryPointByVersion), so nothing links libcuda directly and
// binaries still load on machines without a driver.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace kolo::cuda {

struct AllocationRange {
  uint64_t base = 0;
  uint64_t size = 0;
  // The driver's identifier of the allocation (CU_POINTER_ATTRIBUTE_BUFFER_ID):
  // unique for the life of the process, so a new allocation at a freed one's
  // address and size is told apart from it.
  uint64_t buffer_id = 0;
};

// The allocation containing `device_ptr` in the current context.
absl::StatusOr<AllocationRange> FindAllocation(const void* device_ptr);

}  // namespace kolo::cuda
