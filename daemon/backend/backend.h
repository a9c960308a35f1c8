// Backend: moves and reduces the data of one fused response. The job's
// executor chooses one per response at run time: host tensors go to the
// job's host backend (the shared-memory CPU backend on one node, the host
// multi-node backend across nodes), device tensors to its NCCL backend.
//
// Thread-safety: implementations say; Execute may be called concurrently for
// different jobs, and is called by one thread at a time for one job.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/plan/fusion_planner.h"

namespace kolo::daemon {

// Where backends put the new tensors of allgather, reducescatter and
// alltoall: each request's result area (the executor provides it, over the
// requests' sessions), so backends never reach into a session.
class ResultAllocator {
 public:
  virtual ~ResultAllocator() = default;
  // Allocates `bytes` for the next request of `m` that has no result yet
  // (results are made in request order) and appends its placement, with
  // `value` (the rows of its first dimension), to m.results. Returns where to
  // write it. RESOURCE_EXHAUSTED, naming the tensor and the rank, when the
  // area is full; the executor releases a failed member's results.
  virtual absl::StatusOr<uint8_t*> Allocate(FusedMember& m, uint64_t bytes, int64_t value) = 0;
};

// What the plan says about a response beyond its tensors: its place in the
// job's plan and, across nodes, what the coordinator worked out from every
// node's report. Backends that run on one node need none of it.
struct StepContext {
  // The response's index in the job's plan (the same on every node).
  uint64_t sequence = 0;
  // The ranks of the response's process set, ascending; null: every rank.
  std::shared_ptr<const std::vector<int>> set_ranks;
  // Across nodes, when every rank of this node has joined: the response has
  // no members here, and this node takes part with zeros (allreduce) or as
  // a relay (broadcast) over a buffer laid out from these member sizes.
  bool joined_here = false;
  std::vector<uint64_t> joined_member_bytes;
  // Allgather: every rank's first dimension, by global rank.
  std::vector<int64_t> rows;
  // Alltoall: the set's size x size matrix of rows rank i sends rank j.
  std::vector<int64_t> splits;
  // Set by the executor for every collective it runs.
  ResultAllocator* results = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual absl::string_view name() const = 0;
  // Runs `response` across the local ranks of each member's ready set; on OK
  // every member's outputs hold the result, and members that return a new
  // tensor have `results` filled (one per request, in request order). An
  // error fails every member; a member's own `status` fails just it.
  virtual absl::Status Execute(Response& response, const StepContext& step) = 0;
};

}  // namespace kolo::daemon
