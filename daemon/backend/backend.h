// Backend: moves and reduces the data of one fused response. Backends are
// chosen per response at run time (host tensors on one node go to the
// shared-memory CPU backend; inter-node and device backends plug in here).
//
// Thread-safety: implementations say; Execute may be called concurrently for
// different jobs.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/plan/fusion_planner.h"

namespace kolo::daemon {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual absl::string_view name() const = 0;
  // Runs `response` across the local ranks of each member's ready set; on OK
  // every member's outputs hold the result, and members that return a new
  // tensor have `results` filled (one per request, in request order). An
  // error fails every member; a member's own `status` fails just it.
  virtual absl::Status Execute(Response& response) = 0;
};

}  // namespace kolo::daemon
