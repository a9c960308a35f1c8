// What a backend runs: one fused response (its members, each a ready set of
// this node's requests, laid out in a notional fused buffer) and what the
// plan says about it beyond its tensors (StepContext), with the allocator of
// the new tensors some collectives return. The fusion planner and the
// coordinator make responses; the executor hands them to a backend.
//
// Thread-safety: plain data; ResultAllocator implementations say.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
  // no members here, and this node takes part with zeros (allreduce) over
  // a buffer laid out from these member sizes, or in a barrier (no other
  // kind runs while ranks have joined).
  bool joined_here = false;
  std::vector<uint64_t> joined_member_bytes;
  // Allgather: every rank's first dimension, by global rank.
  std::vector<int64_t> rows;
  // Alltoall: the set's size x size matrix of rows rank i sends rank j.
  std::vector<int64_t> splits;
  // Set by the executor for every collective it runs.
  ResultAllocator* results = nullptr;
};

}  // namespace kolo::daemon
