// Request: one rank's validated collective request, as the job sees it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {

class Session;

struct Request {
  uint64_t request_id = 0;  // the client's, echoed in its completion
  int rank = -1;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root_rank = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;
  std::string name;
  uint64_t bytes = 0;
  // Resolved into the daemon's mapping of the submitting session's arena;
  // valid while `session` is held.
  const uint8_t* input = nullptr;
  uint8_t* output = nullptr;
  std::shared_ptr<Session> session;
  absl::Time submitted_at;
};

}  // namespace kolo::daemon
