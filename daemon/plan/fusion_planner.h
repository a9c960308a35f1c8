// FusionPlanner: a pure planner from one node's agreed, ready names to fused
// responses.
//
// Ready sets are grouped by the shared fusion rule (daemon/plan/fusion.h):
// in ready order, with others of the same collective, dtype, op, scale
// factors and root, until a group would exceed the fusion threshold; a set
// larger than the threshold is a group of its own, and allgather and
// alltoall are never fused. Each response lists its members with their
// offsets in a notional fused buffer, so a backend that stages data (an
// inter-node transfer) packs them there, while the shared-memory backend
// reduces members in place at no copy. Responses come out ordered by their
// first member, so every daemon that plans the same ready list executes the
// same sequence, and the coordinator groups the same names the same way.
//
// Thread-safety: stateless; Plan may be called from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/request.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {

// Where a backend placed one request's new output tensor.
struct ResultPlacement {
  uint64_t offset = 0;  // arena offset in the request's session
  uint64_t bytes = 0;
  int64_t value = 0;        // rows of the first dimension
  uint8_t* data = nullptr;  // where kolod writes it (its mapping of the arena)
};

struct FusedMember {
  ReadySet set;
  uint64_t offset = 0;  // in the fused buffer
  absl::Status status;  // a failure of this member alone
  std::vector<ResultPlacement> results;
};

struct Response {
  CollectiveKind kind = CollectiveKind::kAllreduce;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int root_rank = 0;
  int process_set = 0;
  Compression compression = Compression::kNone;
  // Device tensors (each request names its GPU): the response runs on the
  // job's device backend; host tensors otherwise.
  bool on_device = false;
  std::vector<FusedMember> members;
  uint64_t total_bytes = 0;
};

std::vector<Response> PlanFusion(std::vector<ReadySet> ready, uint64_t fusion_threshold_bytes);

}  // namespace kolo::daemon
