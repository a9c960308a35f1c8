// DeviceTensorRef: how a rank names a tensor in its GPU memory to kolod. It
// is plain data (no CUDA header needed), so the shared-memory submission slot
// can carry it as is and the daemon can validate it before touching CUDA.
//
// A CUDA IPC memory handle always names a whole allocation, so the client
// exports the handle of the allocation's base and sends the tensor's offset
// in it; the daemon maps the base once per session (IpcMappingCache) and adds
// the offset after checking it against the mapped size.
//
// Thread-safety: plain values.
#pragma once

#include <array>
#include <cstdint>

namespace kolo::cuda {

// The bytes of a cudaIpcMemHandle_t or cudaIpcEventHandle_t (both are
// CUDA_IPC_HANDLE_SIZE = 64 bytes; checked where CUDA is included).
inline constexpr size_t kIpcHandleBytes = 64;
using IpcHandleBytes = std::array<uint8_t, kIpcHandleBytes>;

struct DeviceTensorRef {
  IpcHandleBytes memory{};  // cudaIpcMemHandle_t of the allocation's base
  uint64_t offset = 0;      // of the tensor's first byte in the allocation
  uint64_t bytes = 0;       // must equal the request's byte count
  // An interprocess event (cudaEventInterprocess | cudaEventDisableTiming).
  // For an input: recorded by the client after the work that produced the
  // tensor; kolod's stream waits on it before reading. For an output:
  // recorded by kolod after writing the result; the client's stream waits
  // on it before reading.
  IpcHandleBytes event{};
  int32_t device = -1;  // CUDA ordinal of the tensor's GPU, as kolod numbers them
};

// The device side of one request. For an in-place allreduce `output` may
// name the same memory as `input`.
struct DeviceIo {
  DeviceTensorRef input;
  DeviceTensorRef output;
};

}  // namespace kolo::cuda
