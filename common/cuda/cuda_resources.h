// RAII, move-only owners of the CUDA resources kolod uses on a GPU: the
// device (selected per thread), streams, events (plain, interprocess, and
// ones opened from another process's handle), device memory and pinned host
// memory. Each releases its resource exactly once in its destructor; a
// moved-from object owns nothing.
//
// CUDA selects the device per host thread, so every thread that enqueues
// work calls CudaDevice::MakeCurrent first (the backend does so at the top
// of Execute and in its watchdog thread).
//
// Thread-safety: thread-compatible; a const object may be shared (the CUDA
// runtime calls behind the const methods are thread-safe).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cuda/device_tensor.h"

namespace kolo::cuda {

// One GPU, by CUDA ordinal, with its primary context created.
class CudaDevice {
 public:
  // Checks the ordinal, selects the device on the calling thread and
  // creates its primary context (so later calls do not pay for it).
  static absl::StatusOr<CudaDevice> Open(int ordinal);

  int ordinal() const { return ordinal_; }
  const std::string& name() const { return name_; }
  // Whether contexts on this device are shared through the Multi-Process
  // Service (cudaDevAttrMpsEnabled): without it the GPU switches between
  // kolod's context and each rank's for every collective.
  bool mps() const { return mps_; }
  // Selects this device on the calling thread.
  absl::Status MakeCurrent() const;

 private:
  CudaDevice(int ordinal, std::string name, bool mps)
      : ordinal_(ordinal), name_(std::move(name)), mps_(mps) {}
  int ordinal_;
  std::string name_;
  bool mps_;
};

class CudaStream {
 public:
  // A stream on the current device that does not synchronise with the
  // legacy default stream.
  static absl::StatusOr<CudaStream> Create();
  CudaStream(CudaStream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream();

  cudaStream_t get() const { return stream_; }

 private:
  explicit CudaStream(cudaStream_t s) : stream_(s) {}
  cudaStream_t stream_ = nullptr;
};

class CudaEvent {
 public:
  // A timing-free event on the current device.
  static absl::StatusOr<CudaEvent> Create();
  // An event another process can open: cudaEventInterprocess |
  // cudaEventDisableTiming (interprocess events may not time).
  static absl::StatusOr<CudaEvent> CreateInterprocess();
  // Opens an event exported by another process. It behaves as a local
  // timing-free event: it can be recorded, waited on and queried.
  static absl::StatusOr<CudaEvent> OpenIpc(const IpcHandleBytes& handle);

  CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent();

  cudaEvent_t get() const { return event_; }
  // The handle another process passes to OpenIpc (interprocess events only).
  absl::StatusOr<IpcHandleBytes> ExportIpcHandle() const;
  absl::Status Record(cudaStream_t stream) const;
  // True once the work captured by the last Record has completed; an error
  // if that work failed.
  absl::StatusOr<bool> IsComplete() const;

 private:
  explicit CudaEvent(cudaEvent_t e) : event_(e) {}
  cudaEvent_t event_ = nullptr;
};

// Device memory on the current device. Grows on demand, never shrinks.
class DeviceBuffer {
 public:
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  // Makes the buffer at least `bytes` long, discarding its contents if it
  // grows. Growing frees the old memory, which waits for the device to be
  // idle: callers grow only between collectives.
  absl::Status Reserve(size_t bytes);
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Page-locked host memory: the staging area for descriptor uploads (so a
// cudaMemcpyAsync from it is truly asynchronous).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  // As DeviceBuffer::Reserve; no copy in flight may read the old memory.
  absl::Status Reserve(size_t bytes);
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kolo::cuda
