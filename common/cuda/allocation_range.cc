#include "common/cuda/allocation_range.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_status.h"

namespace kolo::cuda {
namespace {

struct Lookup {
  PFN_cuMemGetAddressRange_v3020 fn = nullptr;
  PFN_cuPointerGetAttribute_v4000 attribute = nullptr;
  absl::Status status;
};

// The driver's `name` at ABI `version`, or why there is none.
absl::StatusOr<void*> EntryPoint(const char* name, int version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (absl::Status s = CudaStatus(
          cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found),
          absl::StrCat("looking up ", name));
      !s.ok()) {
    return s;
  }
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    return absl::UnavailableError(absl::StrCat("the CUDA driver has no ", name, " (query result ",
                                               static_cast<int>(found), ")"));
  }
  return fn;
}

// Resolved once per process: the pointer never changes afterwards, so the
// function-local static is immutable state, not shared mutable state.
const Lookup& GetAddressRangeEntryPoint() {
  static const Lookup lookup = [] {
    Lookup l;
    // 12000: the cuMemGetAddressRange ABI as of CUDA 12.0 (the _v2 form with
    // 64-bit addresses and size_t sizes); cuPointerGetAttribute's is 4.0's.
    absl::StatusOr<void*> range = EntryPoint("cuMemGetAddressRange", 12000);
    absl::StatusOr<void*> attribute = EntryPoint("cuPointerGetAttribute", 12000);
    if (!range.ok()) {
      l.status = range.status();
    } else if (!attribute.ok()) {
      l.status = attribute.status();
    } else {
      l.fn = reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(*range);
      l.attribute = reinterpret_cast<PFN_cuPointerGetAttribute_v4000>(*attribute);
    }
    return l;
  }();
  return lookup;
}

}  // namespace

absl::StatusOr<AllocationRange> FindAllocation(const void* device_ptr) {
  const Lookup& lookup = GetAddressRangeEntryPoint();
  if (!lookup.status.ok()) return lookup.status;
  CUdeviceptr base = 0;
  size_t size = 0;
  const CUresult r = lookup.fn(&base, &size, reinterpret_cast<CUdeviceptr>(device_ptr));
  if (r != CUDA_SUCCESS) {
    return CudaDriverStatus(static_cast<int>(r),
                            absl::StrCat("cuMemGetAddressRange(0x",
                                         absl::Hex(reinterpret_cast<uintptr_t>(device_ptr)), ")"));
  }
  unsigned long long buffer_id = 0;  // NOLINT(runtime/int): the driver's type
  const CUresult a =
      lookup.attribute(&buffer_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, static_cast<CUdeviceptr>(base));
  if (a != CUDA_SUCCESS) {
    return CudaDriverStatus(static_cast<int>(a),
                            absl::StrCat("cuPointerGetAttribute(BUFFER_ID, 0x",
                                         absl::Hex(static_cast<uint64_t>(base)), ")"));
  }
  return AllocationRange{static_cast<uint64_t>(base), static_cast<uint64_t>(size),
                         static_cast<uint64_t>(buffer_id)};
}

}  // namespace kolo::cuda
