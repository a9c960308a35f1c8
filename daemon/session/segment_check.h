// The checks a client's session segment passes before kolod maps anything
// out of it: the header (magic, ABI version, ring capacities, layout, result
// area) against the segment's real size and the daemon's limits. The header
// is the daemon's private copy: the client cannot change it between the
// check and its use.
//
// Thread-safety: a pure function; safe from any thread.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo::daemon {

struct SessionLimits {
  uint32_t max_submit_capacity = 4096;
  uint32_t max_completion_capacity = 16384;
  uint64_t max_segment_bytes = uint64_t{64} << 30;
  absl::Duration spin = absl::Microseconds(50);
};

// OK when `header` describes a segment of exactly `segment_bytes` bytes
// whose rings, arena and result area lie inside it, within `limits`.
absl::Status CheckSegmentHeader(const abi::v1::SegmentHeader& header, uint64_t segment_bytes,
                                const SessionLimits& limits);

}  // namespace kolo::daemon
