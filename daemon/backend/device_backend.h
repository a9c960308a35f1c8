// The seam between a job and the backend that runs its device-tensor
// responses. kolod is built with one of two factories (chosen in BUILD by
// whether CUDA and NCCL were found, never by #if in the code that uses it):
// the CUDA one makes an NCCL backend over CUDA IPC tensors, the other
// refuses with UNIMPLEMENTED. Tests pass a fake.
//
// Thread-safety: DeviceBackendFactory::Create is thread-safe; a
// DeviceBackend's Execute calls are serialised by its job, ReleaseSession
// may run concurrently with them.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/backend/backend.h"

namespace kolo::daemon {

class DeviceBackend : public Backend {
public:
  // The session teardown hook: drops the session's cached IPC mappings and
  // events (those held by a running collective close when it finishes).
  virtual void ReleaseSession(const std::string &session_id) = 0;
};

struct DeviceBackendOptions {
  std::string job_id;
  int device = 0; // CUDA ordinal the backend drives
};

class DeviceBackendFactory {
public:
  virtual ~DeviceBackendFactory() = default;
  // The device backend of one single-node job, created on the executing
  // thread when the job's first device response runs. Its error fails that
  // response (and, remembered by the job, every later device response).
  virtual absl::StatusOr<std::unique_ptr<DeviceBackend>>
  Create(const DeviceBackendOptions &options) = 0;
};

// The factory of a kolod built without CUDA: Create is UNIMPLEMENTED.
std::unique_ptr<DeviceBackendFactory> MakeNoDeviceBackendFactory();

// The factory this kolod was built with (device_backend_factory_{cuda,none}.cc
// in //daemon:device_backend_factory).
std::unique_ptr<DeviceBackendFactory> MakeDeviceBackendFactory();

} // namespace kolo::daemon
