// What a job is given to make its negotiator: the job builds none itself, so
// that which negotiator (one node, or a coordinator across nodes) and which
// backend it runs over are chosen by whoever makes jobs (the daemon, through
// its registry; a test, with its own).
//
// Thread-safety: a factory is called on the thread that makes a job, once
// per job; it must be callable from several such threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "daemon/backend/backend.h"
#include "daemon/backend/device_backend.h"
#include "daemon/job/job_layout.h"
#include "daemon/negotiation/negotiator.h"

namespace kolo::daemon {

// The job a negotiator is made for.
struct NegotiatorParams {
  std::string job_id;
  std::string job_token;
  int size = 0;
  // Host tensors of a job on one node run here; outlives the job.
  Backend* host_backend = nullptr;
  uint64_t fusion_threshold_bytes = 0;
  JobLayout layout;
  // Makes device backends (and their communicator ids); may be null.
  DeviceBackendFactory* device_backends = nullptr;
};

// Makes the negotiator of the job `params` describes, running its plans on
// `runner` (the job's executor, which outlives the negotiator).
using NegotiatorFactory =
    std::function<std::unique_ptr<Negotiator>(const NegotiatorParams& params, StepRunner* runner)>;

}  // namespace kolo::daemon
