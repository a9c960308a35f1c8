#include "common/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace kolo::cuda {

bool IsStickyCudaError(cudaError_t code) {
  switch (code) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

absl::StatusCode CudaErrorToStatusCode(cudaError_t code) {
  switch (code) {
    case cudaSuccess:
      return absl::StatusCode::kOk;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorInvalidKernelImage:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorMemoryAllocation:
    case cudaErrorLaunchOutOfResources:
    case cudaErrorTooManyPeers:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorInitializationError:
    case cudaErrorCudartUnloading:
    case cudaErrorNotReady:
      return absl::StatusCode::kUnavailable;
    case cudaErrorNotSupported:
    case cudaErrorNotPermitted:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return absl::StatusCode::kUnimplemented;
    case cudaErrorMapBufferObjectFailed:
    case cudaErrorAlreadyMapped:
    case cudaErrorPeerAccessAlreadyEnabled:
    case cudaErrorPeerAccessNotEnabled:
    case cudaErrorPeerAccessUnsupported:
    case cudaErrorContextIsDestroyed:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status CudaStatus(cudaError_t code, absl::string_view what) {
  if (code == cudaSuccess) return absl::OkStatus();
  // Both lookups are tables in the runtime: safe without a device or driver.
  const char* name = cudaGetErrorName(code);
  const char* text = cudaGetErrorString(code);
  std::string message =
      absl::StrCat(what, ": ", name != nullptr ? name : "cudaError", " (", static_cast<int>(code),
                   "): ", text != nullptr ? text : "unknown");
  if (IsStickyCudaError(code)) {
    absl::StrAppend(&message, " [sticky: the CUDA context of kolod is unusable]");
  }
  return absl::Status(CudaErrorToStatusCode(code), message);
}

absl::Status CudaDriverStatus(int curesult, absl::string_view what) {
  if (curesult == 0) return absl::OkStatus();
  const auto as_runtime = static_cast<cudaError_t>(curesult);
  return absl::Status(CudaErrorToStatusCode(as_runtime),
                      absl::StrCat(what, ": CUresult ", curesult,
                                   " (as a runtime error: ", cudaGetErrorName(as_runtime), ")"));
}

absl::Status CudaLaunchStatus(int code, absl::string_view what) {
  return CudaStatus(static_cast<cudaError_t>(code), what);
}

}  // namespace kolo::cuda
