// The one place where CUDA runtime error codes become absl::Status.
//
// Codes map to status codes by what a caller can do about them: bad
// arguments (INVALID_ARGUMENT), out of memory (RESOURCE_EXHAUSTED), no usable
// device or driver (UNAVAILABLE), unsupported (UNIMPLEMENTED), and the
// sticky device faults that leave the context unusable (INTERNAL, with the
// text saying so). The message names the operation, the CUDA error name and
// its description: `cudaMalloc of 64 MiB on device 0: cudaErrorMemoryAllocation
// (2): out of memory`.
//
// Thread-safety: pure functions.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kolo::cuda {

// OK for cudaSuccess; otherwise an error naming `what`.
absl::Status CudaStatus(cudaError_t code, absl::string_view what);

// The same for a Kolo kernel launcher, which returns its cudaError_t as int.
absl::Status CudaLaunchStatus(int code, absl::string_view what);

absl::StatusCode CudaErrorToStatusCode(cudaError_t code);

// The same for a CUDA driver API result (a CUresult, passed as int so that
// this header needs no cuda.h). Driver and runtime codes share their numbers
// for the errors Kolo meets (invalid value, not found, out of memory, ...).
absl::Status CudaDriverStatus(int curesult, absl::string_view what);

// Whether `code` is a sticky fault after which the CUDA context of the
// process is unusable (every later call fails); the daemon must not reuse
// the device in this process.
bool IsStickyCudaError(cudaError_t code);

}  // namespace kolo::cuda

// Returns from the enclosing function if a CUDA call fails.
#define KOLO_RETURN_IF_CUDA_ERROR(call, what)                   \
  do {                                                          \
    const cudaError_t kolo_cuda_code_ = (call);                 \
    if (kolo_cuda_code_ != cudaSuccess) {                       \
      return ::kolo::cuda::CudaStatus(kolo_cuda_code_, (what)); \
    }                                                           \
  } while (0)
