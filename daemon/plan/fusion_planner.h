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
#include "daemon/core/response.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {

std::vector<Response> PlanFusion(std::vector<ReadySet> ready, uint64_t fusion_threshold_bytes);

}  // namespace kolo::daemon
