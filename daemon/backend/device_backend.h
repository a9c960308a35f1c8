// The seam between a job and the backend that runs its device-tensor
// responses. kolod is built with one of two factories (chosen in BUILD by
// whether CUDA and NCCL were found, never by #if in the code that uses it):
// the CUDA one makes an NCCL backend over CUDA IPC tensors, the other
// refuses with UNIMPLEMENTED. Tests pass a fake.
//
// Thread-safety: DeviceBackendFactory is thread-safe; a DeviceBackend's
// Execute calls are serialised by its job, ReleaseSession and Abort may run
// concurrently with them.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/device_comm_plan.h"

namespace kolo::daemon {

class DeviceBackend : public Backend {
 public:
  // The session teardown hook: drops the session's cached IPC mappings and
  // events (those held by a running collective close when it finishes).
  virtual void ReleaseSession(const std::string& session_id) = 0;
  // The job ended: aborts its communicators at once, so that a collective
  // waiting on a peer that will never come fails now (every later Execute
  // fails). Called from any thread, also while Execute runs.
  virtual void Abort(const absl::Status& why) = 0;
};

struct DeviceBackendOptions {
  std::string job_id;
  // The job's communicator: every daemon of the job gets the same plan.
  DeviceCommPlan comm;
  // The global ranks this daemon hosts (its lanes: LocalLanes(comm, ...)).
  std::vector<int> local_ranks;
  // Set (by the job, from any thread) when the job ends: joining the
  // communicator stops waiting for the other daemons. Outlives the backend.
  const std::atomic<bool>* cancel = nullptr;
};

class DeviceBackendFactory {
 public:
  virtual ~DeviceBackendFactory() = default;
  // A fresh communicator id (an ncclUniqueId's bytes), made once per job by
  // the daemon that plans the job's communicator: the job itself on one
  // node, the coordinator's daemon across nodes.
  virtual absl::StatusOr<std::string> NewCommId() = 0;
  // The device backend of one job on this daemon, created on the executing
  // thread when the job's first device response runs (every daemon of a
  // multi-node job does so at the same planned response, so their NCCL
  // initialisations meet). Its error fails that response (and, remembered
  // by the job, every later device response).
  virtual absl::StatusOr<std::unique_ptr<DeviceBackend>> Create(
      const DeviceBackendOptions& options) = 0;
};

// The factory of a kolod built without CUDA: NewCommId and Create are
// UNIMPLEMENTED.
std::unique_ptr<DeviceBackendFactory> MakeNoDeviceBackendFactory();

// Limits the device backends a factory makes work within.
struct DeviceBackendLimits {
  absl::Duration init_timeout = absl::Seconds(120);        // joining the communicator
  absl::Duration collective_timeout = absl::Seconds(300);  // one collective
};

// The factory this kolod was built with (device_backend_factory_{cuda,none}.cc
// in //daemon:device_backend_factory).
std::unique_ptr<DeviceBackendFactory> MakeDeviceBackendFactory(DeviceBackendLimits limits);

}  // namespace kolo::daemon
