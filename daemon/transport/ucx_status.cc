#include "daemon/transport/ucx_status.h"

#include "absl/strings/str_format.h"

namespace kolo::daemon {
namespace {

absl::StatusCode CodeFor(ucs_status_t s) {
  switch (s) {
    case UCS_ERR_CANCELED:
      return absl::StatusCode::kCancelled;
    case UCS_ERR_TIMED_OUT:
      return absl::StatusCode::kDeadlineExceeded;
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      return absl::StatusCode::kResourceExhausted;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      return absl::StatusCode::kInvalidArgument;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NOT_IMPLEMENTED:
      return absl::StatusCode::kUnimplemented;
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_NO_ELEM:
      return absl::StatusCode::kNotFound;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_BUSY:
      return absl::StatusCode::kUnavailable;
    case UCS_ERR_ALREADY_EXISTS:
      return absl::StatusCode::kAlreadyExists;
    case UCS_ERR_OUT_OF_RANGE:
      return absl::StatusCode::kOutOfRange;
    default:
      // A broken link or endpoint means the peer is unreachable.
      if (UCS_IS_LINK_ERROR(s) || UCS_IS_ENDPOINT_ERROR(s)) {
        return absl::StatusCode::kUnavailable;
      }
      // Truncation and the rest are protocol or internal faults.
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status UcsToStatus(ucs_status_t status, absl::string_view what) {
  if (status == UCS_OK || status == UCS_INPROGRESS) return absl::OkStatus();
  return absl::Status(CodeFor(status),
                      absl::StrFormat("%s: %s (UCX %d)", what, ucs_status_string(status),
                                      static_cast<int>(status)));
}

}  // namespace kolo::daemon
