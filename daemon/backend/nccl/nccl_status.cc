#include "daemon/backend/nccl/nccl_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kolo::daemon::nccl {
namespace {

const char* ResultName(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult";
  }
}

}  // namespace

absl::StatusCode NcclResultToStatusCode(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return absl::StatusCode::kOk;
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    case ncclSystemError:
    case ncclRemoteError:
    case ncclInProgress:
      return absl::StatusCode::kUnavailable;
    case ncclUnhandledCudaError:
    case ncclInternalError:
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status NcclStatus(ncclResult_t result, absl::string_view what, ncclComm_t comm) {
  if (result == ncclSuccess) return absl::OkStatus();
  const char* text = ncclGetErrorString(result);
  std::string message = absl::StrCat(what, ": ", ResultName(result), " (", static_cast<int>(result),
                                     "): ", text != nullptr ? text : "unknown");
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, "; NCCL: ", last);
  }
  return absl::Status(NcclResultToStatusCode(result), message);
}

}  // namespace kolo::daemon::nccl
