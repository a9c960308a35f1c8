// Batched copy with scaling: the pack and unpack steps of a fused device
// collective in one kernel launch. Pack copies N tensors from their own
// device pointers into a fusion buffer at their offsets (prescale fused in);
// unpack copies the fused result back to N outputs (postscale fused in).
//
// Work is split into chunks of kCopyChunkBytes; each block takes whole chunks
// and finds its segment by binary search over a descriptor array that lives
// in device memory, so one huge tensor and a thousand small ones are spread
// over the GPU evenly by the same launch. Where a segment's source and
// destination share their alignment modulo 16 bytes the body moves 16-byte
// vectors; otherwise it copies element by element (still coalesced).
//
// Scaling follows kernels::ScaleCopy (kernels/cpu/reduce.h) bit for bit; a
// scale of exactly 1.0 is a plain copy (of bool bytes too; any other scale
// of bool is refused with cudaErrorInvalidValue).
//
// Built by nvcc where the CUDA toolkit exists; this header needs no CUDA
// header. Thread-safety: stateless; launches on distinct streams may overlap
// if their destinations do not.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/kolo/abi/types.h"

namespace kolo::kernels::cuda {

inline constexpr uint64_t kCopyChunkBytes = 32768;

// One tensor to move: plain data, uploaded to the device as an array.
// Addresses are device addresses; each must be aligned to the element size.
struct CopySegment {
  uint64_t src = 0;
  uint64_t dst = 0;
  uint64_t count = 0;        // elements
  uint64_t first_chunk = 0;  // filled by AssignCopyChunks
};
static_assert(sizeof(CopySegment) == 32, "CopySegment is uploaded as is");

// Numbers the chunks of `segments` (fills first_chunk, in order) and returns
// the total; pass that total to BatchedCopyAsync.
inline uint64_t AssignCopyChunks(DType dtype, CopySegment* segments, size_t n) {
  const uint64_t chunk_elems = kCopyChunkBytes / DTypeSize(dtype);
  uint64_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    segments[i].first_chunk = next;
    next += (segments[i].count + chunk_elems - 1) / chunk_elems;
  }
  return next;
}

// Launches dst[i] = src[i] * scale for every segment of `device_segments`
// (an array of `num_segments` in device memory, numbered by
// AssignCopyChunks) on `stream` (a cudaStream_t; nullptr is the legacy
// default stream). The descriptor array must stay valid until the kernel
// has run. Sources and destinations must not overlap. Returns the launch's
// cudaError_t as an int (0 on success).
int BatchedCopyAsync(DType dtype, const CopySegment* device_segments, uint32_t num_segments,
                     uint64_t total_chunks, double scale, void* stream);

}  // namespace kolo::kernels::cuda
