// Fuzzes CheckSegmentHeader with a header, a segment size and limits taken
// from the input. An accepted header must describe rings, an arena and a
// result area that lie, without overflow, inside the segment and within the
// limits: Session::Open maps them from the header without further checks.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "daemon/session/segment_check.h"
#include "tools/fuzz/fuzz_input.h"

namespace kolo::daemon {
namespace {

using abi::v1::CompletionSlot;
using abi::v1::SegmentHeader;
using abi::v1::SubmitSlot;

// [offset, offset + bytes) lies inside [0, total) without overflow.
bool Inside(uint64_t offset, uint64_t bytes, uint64_t total) {
  return offset <= total && bytes <= total - offset;
}

void Run(fuzz::FuzzInput& in) {
  SessionLimits limits;
  // Mostly the defaults; sometimes limits from the input.
  if (in.Take<uint8_t>() & 1) {
    limits.max_submit_capacity = in.Take<uint32_t>();
    limits.max_completion_capacity = in.Take<uint32_t>();
  }
  uint64_t segment_bytes = in.Take<uint64_t>();
  SegmentHeader h;
  // Through a void*: SegmentHeader holds atomics, and a client's bytes are
  // copied into it the same way.
  in.TakeBytes(static_cast<void*>(&h), sizeof(h));
  if (in.Take<uint8_t>() & 1) {
    // Start from a valid header so the checks past magic and version are
    // reached; the remaining bytes then perturb single fields.
    uint32_t submit = uint32_t{1} << (in.Take<uint8_t>() % 16);
    uint32_t completion = uint32_t{1} << (in.Take<uint8_t>() % 16);
    uint64_t arena = in.Take<uint32_t>();
    uint64_t result = in.Take<uint32_t>();
    abi::v1::InitSegmentHeader(&h, submit, completion, arena, result);
    segment_bytes = h.total_bytes;
    while (!in.empty()) {
      uint64_t value = in.Take<uint64_t>();
      switch (in.Take<uint8_t>() % 9) {
        case 0:
          h.submit_capacity = static_cast<uint32_t>(value);
          break;
        case 1:
          h.completion_capacity = static_cast<uint32_t>(value);
          break;
        case 2:
          h.submit_offset = value;
          break;
        case 3:
          h.completion_offset = value;
          break;
        case 4:
          h.arena_offset = value;
          break;
        case 5:
          h.arena_bytes = value;
          break;
        case 6:
          h.total_bytes = value;
          break;
        case 7:
          h.result_bytes = value;
          break;
        case 8:
          segment_bytes = value;
          break;
      }
    }
  }
  if (!CheckSegmentHeader(h, segment_bytes, limits).ok()) return;

  fuzz::Require(h.magic == abi::v1::kMagic && h.version == abi::v1::kVersion);
  fuzz::Require(h.submit_capacity > 0 && (h.submit_capacity & (h.submit_capacity - 1)) == 0);
  fuzz::Require(h.completion_capacity > 0 &&
                (h.completion_capacity & (h.completion_capacity - 1)) == 0);
  fuzz::Require(h.submit_capacity <= limits.max_submit_capacity);
  fuzz::Require(h.completion_capacity <= limits.max_completion_capacity);
  fuzz::Require(h.submit_offset >= sizeof(SegmentHeader));
  fuzz::Require(
      Inside(h.submit_offset, uint64_t{h.submit_capacity} * sizeof(SubmitSlot), segment_bytes));
  fuzz::Require(h.completion_offset >=
                h.submit_offset + uint64_t{h.submit_capacity} * sizeof(SubmitSlot));
  fuzz::Require(Inside(h.completion_offset,
                       uint64_t{h.completion_capacity} * sizeof(CompletionSlot), segment_bytes));
  fuzz::Require(h.arena_offset >=
                h.completion_offset + uint64_t{h.completion_capacity} * sizeof(CompletionSlot));
  fuzz::Require(Inside(h.arena_offset, h.arena_bytes, segment_bytes));
  fuzz::Require(h.result_bytes <= h.arena_bytes && h.result_bytes % 64 == 0);
}

}  // namespace
}  // namespace kolo::daemon

KOLO_FUZZ_TARGET(kolo::daemon::Run)
