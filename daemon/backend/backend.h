// Backend: moves and reduces the data of one fused response. Backends are
// chosen per response at run time (host tensors on one node go to the
// shared-memory CPU backend; inter-node and device backends plug in here).
//
// Thread-safety: implementations say; Execute may be called concurrently for
// different jobs.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/fusion_planner.h"

namespace kolo::daemon {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual absl::string_view name() const = 0;
  // Runs `response` across the `job_size` local ranks; on OK every member's
  // outputs hold the result. An error fails every member.
  virtual absl::Status Execute(const Response& response, int job_size) = 0;
};

}  // namespace kolo::daemon
