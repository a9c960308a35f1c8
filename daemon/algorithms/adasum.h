// Adasum (proto/kolo/abi/types.h, kAdasum): the ranks' tensors combined
// pairwise in a binary tree, each pair (a, b) by kernels/cpu/adasum.h.
//
// The tree, over n operands in order (a node's local ranks in rank order,
// then the nodes in node order): with p the largest power of two <= n and
// extra = n - p, operands 2i and 2i+1 (i < extra) combine first; the p
// values left then combine level by level, (0, 1), (2, 3), ... and then
// those results pairwise again, until one is left. A job's Adasum is the
// tree over each node's ranks, then the tree over the nodes' results: the
// tree over all ranks at once wherever every node holds the same power of
// two of consecutive ranks (one rank per node included). A joined rank
// contributes a zero tensor, which leaves its partner as it is.
//
// Thread-safety: reentrant; concurrent calls on one transport need distinct
// tag bases.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/transport/transport.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {

// The tree over `inputs` (>= 1 tensors of `count` elements, in tree order),
// written to `out` multiplied by `scale`. `out` may be one of the inputs.
// Scratch memory: up to half the inputs' bytes.
absl::Status AdasumTree(DType dtype, absl::Span<const void* const> inputs, void* out,
                        size_t count, double scale = 1.0);

// The tree over the nodes of `transport`: every node passes `count` elements
// in `buffer`, holding tensors that end at the element offsets `tensor_ends`
// (ascending, the last == count; each tensor is combined on its own), and
// ends with the same result, bit for bit, in that buffer. Every node passes
// the same count, dtype, tensor_ends and tag_base (low 24 bits zero).
//
// Recursive vector halving, distance doubling: at each level a node keeps
// half of its part of the buffer and swaps the other half with its partner,
// the nodes that hold the two operands' parts add up their pieces'
// products (three doubles a tensor), and each combines its piece; then the
// pieces travel back level by level until every node has the whole result.
// Each node moves about 2(p-1)/p of the buffer; a node count that is not a
// power of two first folds the first 2*extra nodes in pairs (the buffer
// moves whole once there and back). Scratch: half the buffer (the whole
// buffer on a node that folds another in).
absl::Status AdasumAllreduce(Transport& transport, void* buffer, size_t count, DType dtype,
                             absl::Span<const size_t> tensor_ends, uint64_t tag_base,
                             absl::Time deadline);

}  // namespace kolo::daemon
