// The SDK's seam for device tensors. libkolo is linked with one of two
// implementations (chosen in BUILD by whether CUDA was found): the CUDA one
// (client/cuda/device_tensor_io_cuda.cc) exports the tensors as CUDA IPC
// handles and orders the caller's stream with kolod's through interprocess
// events; the other refuses device tensors with UNIMPLEMENTED.
//
// Thread-safety: DeviceTensorIo is thread-safe; a DevicePending is used by
// one thread at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo::client {

// One submitted device request, until its completion arrives.
class DevicePending {
 public:
  virtual ~DevicePending() = default;
  // The request completed with `status`. On success makes the caller's
  // stream wait for kolod's writes to the output (cudaStreamWaitEvent: no
  // host synchronisation); either way frees the request's events.
  virtual absl::Status Complete(const absl::Status& status) = 0;
};

class DeviceTensorIo {
 public:
  virtual ~DeviceTensorIo() = default;
  // Fills the device fields and flag of `slot` for `input_bytes` at `input`
  // and `output_bytes` at `output` (device memory of CUDA device `device`)
  // and records the input's ready event on `stream` (a cudaStream_t; null:
  // the legacy default stream), so kolod reads only after the work enqueued
  // there so far.
  virtual absl::StatusOr<std::unique_ptr<DevicePending>> Prepare(const void* input,
                                                                 uint64_t input_bytes, void* output,
                                                                 uint64_t output_bytes, int device,
                                                                 void* stream,
                                                                 abi::v1::SubmitSlot* slot) = 0;
};

// The implementation libkolo was built with.
std::unique_ptr<DeviceTensorIo> MakeDeviceTensorIo();

}  // namespace kolo::client
