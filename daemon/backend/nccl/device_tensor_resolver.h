// DeviceTensorResolver: turns a request's device tensors into addresses and
// events kolod's stream can use. The IPC implementation maps other
// processes' memory (IpcTensorResolver); tests resolve in-process pointers
// with a fake, so the backend runs on one GPU in one process.
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/core/request.h"

namespace kolo::daemon::nccl {

struct ResolvedTensor {
  uint8_t* data = nullptr;      // valid on the backend's device
  uint64_t bytes = 0;           // the client's size of it
  cudaEvent_t event = nullptr;  // see cuda::DeviceTensorRef::event
};

struct ResolvedIo {
  ResolvedTensor input;
  ResolvedTensor output;
  // Keeps the mappings and events above open while the collective runs.
  std::vector<std::shared_ptr<const void>> holds;
};

class DeviceTensorResolver {
 public:
  virtual ~DeviceTensorResolver() = default;
  // Called on the executing thread with the backend's device current.
  // Errors concern this request alone (INVALID_ARGUMENT for bad handles,
  // offsets or sizes). The input has the request's bytes, and so has the
  // output of an allreduce or broadcast; an allgather's or reducescatter's
  // output size is the backend's to check.
  virtual absl::StatusOr<ResolvedIo> Resolve(const Request& request) = 0;
};

}  // namespace kolo::daemon::nccl
