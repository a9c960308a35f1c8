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
#include "daemon/core/response.h"

namespace kolo::daemon {

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
