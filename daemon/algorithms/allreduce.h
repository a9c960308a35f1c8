// Inter-node allreduce over a Transport: every node passes its `count`
// elements in `buffer` and ends with the elementwise reduction over all nodes
// in that same buffer.
//
// Common contract:
//   - Every node calls with the same count, dtype, op, tag_base and
//     chunk_bytes. `op` is kSum, kMin, kMax or kProduct (average is a sum
//     the caller scales). `tag_base` has its low 24 bits zero (see
//     collective_common.h for the layout); two collectives in flight at once
//     need different tag bases.
//   - `buffer` is aligned to the element size.
//   - Every node ends with bit-identical results. Elements are combined in a
//     fixed order, so integer-valued floating-point data (while exactly
//     representable) gives exactly the plain sequential sum. bool results
//     are bytes of 0 or 1, on a single node too (kernels::Reduce).
//   - On error (a transfer failed, the transport was aborted, `deadline`
//     passed) the buffer's contents are unspecified and no transfer of this
//     call is left outstanding.
//
// Thread-safety: reentrant; concurrent calls on one transport need distinct
// tag bases.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/algorithms/pieced_buffer.h"
#include "daemon/transport/transport.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {

inline constexpr size_t kDefaultChunkBytes = size_t{1} << 20;
// Allreduce() uses recursive doubling up to this many bytes, the ring above.
inline constexpr size_t kRecursiveDoublingMaxBytes = size_t{64} << 10;

// Reduce-scatter then allgather around the ring 0 -> 1 -> ... -> n-1 -> 0.
// Each node moves 2(n-1)/n of the buffer, in chunks of at most
// `chunk_bytes` with a few chunks in flight per link; scratch memory is
// a few chunks. Each segment is reduced along the ring once and the result
// is copied to the others.
absl::Status RingAllreduce(Transport& transport, void* buffer, size_t count, DType dtype,
                           ReduceOp op, uint64_t tag_base, absl::Time deadline,
                           size_t chunk_bytes = kDefaultChunkBytes);
// The same on a pieced buffer (every node passes pieces of the same total,
// laid out as it likes), the result multiplied by `postscale` (applied in
// the last reduction, so it costs no pass of its own).
absl::Status RingAllreduce(Transport& transport, const PiecedBuffer& buffer, DType dtype,
                           ReduceOp op, double postscale, uint64_t tag_base, absl::Time deadline,
                           size_t chunk_bytes = kDefaultChunkBytes);

// Recursive doubling: log2(n) exchanges of the whole buffer (chunk by chunk).
// For latency-bound small buffers. With n not a power of two, the first
// 2*(n - p) nodes (p the largest power of two below n) pair up first: the
// even one of each pair hands its data to the odd one, sits out the
// exchanges, and receives the result at the end.
absl::Status RecursiveDoublingAllreduce(Transport& transport, void* buffer, size_t count,
                                        DType dtype, ReduceOp op, uint64_t tag_base,
                                        absl::Time deadline,
                                        size_t chunk_bytes = kDefaultChunkBytes);

// The allreduce the daemon calls: recursive doubling up to
// kRecursiveDoublingMaxBytes, the ring above.
absl::Status Allreduce(Transport& transport, void* buffer, size_t count, DType dtype, ReduceOp op,
                       uint64_t tag_base, absl::Time deadline,
                       size_t chunk_bytes = kDefaultChunkBytes);
// The same on a pieced buffer (the tensors of a fused response, in place),
// the result multiplied by `postscale`. Up to kRecursiveDoublingMaxBytes the
// pieces are packed into one buffer for recursive doubling; above, the ring
// works on them where they are.
absl::Status Allreduce(Transport& transport, const PiecedBuffer& buffer, DType dtype, ReduceOp op,
                       double postscale, uint64_t tag_base, absl::Time deadline,
                       size_t chunk_bytes = kDefaultChunkBytes);

}  // namespace kolo::daemon
