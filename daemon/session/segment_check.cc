#include "daemon/session/segment_check.h"

#include "absl/strings/str_cat.h"

namespace kolo::daemon {
namespace {

using abi::v1::SegmentHeader;

bool IsPowerOfTwo(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

absl::Status CheckSegmentHeader(const SegmentHeader& h, uint64_t segment_bytes,
                                const SessionLimits& limits) {
  if (h.magic != abi::v1::kMagic) {
    return absl::InvalidArgumentError("segment has no Kolo header (bad magic)");
  }
  if (h.version != abi::v1::kVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment ABI version ", h.version, ", this kolod speaks ", abi::v1::kVersion));
  }
  if (!IsPowerOfTwo(h.submit_capacity) || h.submit_capacity > limits.max_submit_capacity ||
      !IsPowerOfTwo(h.completion_capacity) ||
      h.completion_capacity > limits.max_completion_capacity) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring capacities ", h.submit_capacity, "/", h.completion_capacity,
                     " must be powers of two at most ", limits.max_submit_capacity, "/",
                     limits.max_completion_capacity));
  }
  abi::v1::Layout want =
      abi::v1::ComputeLayout(h.submit_capacity, h.completion_capacity, h.arena_bytes);
  if (h.submit_offset != want.submit_offset || h.completion_offset != want.completion_offset ||
      h.arena_offset != want.arena_offset || h.total_bytes != segment_bytes ||
      want.total_bytes != segment_bytes || h.arena_bytes > segment_bytes) {
    return absl::InvalidArgumentError("segment layout does not match its header's sizes");
  }
  if (h.result_bytes > h.arena_bytes || h.result_bytes % 64 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("result area of ", h.result_bytes,
                                                   " bytes does not fit the arena of ",
                                                   h.arena_bytes, " bytes in 64-byte units"));
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon
