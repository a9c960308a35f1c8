// The fusion rule, the fused-buffer layout and the greedy grouping that the
// one-node planner (PlanFusion) and the multi-node Coordinator share, so
// the same ready tensors in the same order make the same groups with the
// same offsets on one node and across nodes.
//
//   1. Tensors fuse when Fusable: same collective, dtype, process set and
//      memory (device or host); broadcasts with the same root; allreduce
//      and reducescatter with the same op, scale factors and compression;
//      barriers always. Allgather and alltoall never fuse (their layout
//      depends on every rank's rows), nor do joins and process-set changes.
//   2. Members are laid out in order, each starting at a multiple of
//      kFusionAlignment; the buffer ends where the last member ends (no
//      trailing padding: a single tensor's layout is exactly its bytes).
//   3. Grouping is greedy in ready order: a tensor joins the first open
//      group it is Fusable with whose layout still ends within the
//      threshold, else opens a new group (alone, it may exceed the
//      threshold). Groups come out ordered by their first member.
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "daemon/plan/tensor_desc.h"

namespace kolo::daemon::plan {

// Members of a fused buffer start on 64-byte boundaries so SIMD kernels and
// device copies see aligned data.
inline constexpr uint64_t kFusionAlignment = 64;

constexpr uint64_t AlignMember(uint64_t offset) {
  return (offset + kFusionAlignment - 1) & ~(kFusionAlignment - 1);
}

bool Fusable(const TensorDesc& a, const TensorDesc& b);

struct FusionLayout {
  std::vector<uint64_t> offsets;  // one per member, in member order
  uint64_t total_bytes = 0;       // where the last member ends
};

// The layout of members of `member_bytes` bytes each, in order.
FusionLayout LayOut(absl::Span<const uint64_t> member_bytes);

// One tensor to group. Tensors whose `apart_key`s differ never share a
// group: the coordinator keeps apart tensors that different sets of fully
// joined nodes take part in; the one-node planner leaves it empty.
struct FusionCandidate {
  TensorDesc desc;
  std::vector<int> apart_key;
};

struct FusionGroup {
  std::vector<size_t> members;  // indices into the candidates, ascending
  FusionLayout layout;
};

// Groups `candidates` (in ready order) under rule 3 with `threshold_bytes`.
std::vector<FusionGroup> GroupForFusion(absl::Span<const FusionCandidate> candidates,
                                        uint64_t threshold_bytes);

}  // namespace kolo::daemon::plan
