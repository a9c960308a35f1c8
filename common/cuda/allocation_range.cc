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
  absl::Status status;
};

// Resolved once per process: the pointer never changes afterwards, so the
// function-local static is immutable state, not shared mutable state.
const Lookup& GetAddressRangeEntryPoint() {
  static const Lookup lookup = [] {
    Lookup l;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    // 12000: the cuMemGetAddressRange ABI as of CUDA 12.0 (the _v2 form with
    // 64-bit addresses and size_t sizes).
    l.status = CudaStatus(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000,
                                                           cudaEnableDefault, &found),
                          "looking up cuMemGetAddressRange");
    if (l.status.ok() && (found != cudaDriverEntryPointSuccess || fn == nullptr)) {
      l.status = absl::UnavailableError(
          absl::StrCat("the CUDA driver has no cuMemGetAddressRange (query result ",
                       static_cast<int>(found), ")"));
    }
    if (l.status.ok()) l.fn = reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(fn);
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
  return AllocationRange{static_cast<uint64_t>(base), static_cast<uint64_t>(size)};
}

}  // namespace kolo::cuda
