#include "common/cuda/cuda_resources.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_status.h"

namespace kolo::cuda {

static_assert(CUDA_IPC_HANDLE_SIZE == kIpcHandleBytes, "IpcHandleBytes must hold a CUDA handle");
static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes);
static_assert(sizeof(cudaIpcEventHandle_t) == kIpcHandleBytes);

absl::StatusOr<CudaDevice> CudaDevice::Open(int ordinal) {
  int count = 0;
  KOLO_RETURN_IF_CUDA_ERROR(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (ordinal < 0 || ordinal >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", ordinal, " does not exist: ", count, " visible"));
  }
  KOLO_RETURN_IF_CUDA_ERROR(cudaSetDevice(ordinal), absl::StrCat("cudaSetDevice(", ordinal, ")"));
  // Creates the primary context now rather than inside the first collective.
  KOLO_RETURN_IF_CUDA_ERROR(cudaFree(nullptr),
                            absl::StrCat("creating the context of CUDA device ", ordinal));
  cudaDeviceProp prop;
  KOLO_RETURN_IF_CUDA_ERROR(cudaGetDeviceProperties(&prop, ordinal),
                            absl::StrCat("cudaGetDeviceProperties(", ordinal, ")"));
  int mps = 0;
  if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();  // an older driver without the attribute: no MPS
    mps = 0;
  }
  return CudaDevice(ordinal, std::string(prop.name), mps != 0);
}

absl::Status CudaDevice::MakeCurrent() const {
  KOLO_RETURN_IF_CUDA_ERROR(cudaSetDevice(ordinal_), absl::StrCat("cudaSetDevice(", ordinal_, ")"));
  return absl::OkStatus();
}

absl::StatusOr<CudaStream> CudaStream::Create() {
  cudaStream_t s = nullptr;
  KOLO_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                            "cudaStreamCreateWithFlags");
  return CudaStream(s);
}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

CudaStream::~CudaStream() {
  // Work already enqueued still runs to completion; the stream's resources
  // are released when it has.
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<CudaEvent> CudaEvent::Create() {
  cudaEvent_t e = nullptr;
  KOLO_RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                            "cudaEventCreateWithFlags");
  return CudaEvent(e);
}

absl::StatusOr<CudaEvent> CudaEvent::CreateInterprocess() {
  cudaEvent_t e = nullptr;
  KOLO_RETURN_IF_CUDA_ERROR(
      cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming),
      "cudaEventCreateWithFlags(interprocess)");
  return CudaEvent(e);
}

absl::StatusOr<CudaEvent> CudaEvent::OpenIpc(const IpcHandleBytes& handle) {
  cudaIpcEventHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  cudaEvent_t e = nullptr;
  KOLO_RETURN_IF_CUDA_ERROR(cudaIpcOpenEventHandle(&e, h), "cudaIpcOpenEventHandle");
  return CudaEvent(e);
}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

absl::StatusOr<IpcHandleBytes> CudaEvent::ExportIpcHandle() const {
  cudaIpcEventHandle_t h;
  KOLO_RETURN_IF_CUDA_ERROR(cudaIpcGetEventHandle(&h, event_), "cudaIpcGetEventHandle");
  IpcHandleBytes bytes;
  std::memcpy(bytes.data(), &h, sizeof(h));
  return bytes;
}

absl::Status CudaEvent::Record(cudaStream_t stream) const {
  KOLO_RETURN_IF_CUDA_ERROR(cudaEventRecord(event_, stream), "cudaEventRecord");
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaEvent::IsComplete() const {
  const cudaError_t code = cudaEventQuery(event_);
  if (code == cudaSuccess) return true;
  if (code == cudaErrorNotReady) return false;
  return CudaStatus(code, "cudaEventQuery");
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer b;
  if (absl::Status s = b.Reserve(bytes); !s.ok()) return s;
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

absl::Status DeviceBuffer::Reserve(size_t bytes) {
  if (bytes <= size_ && data_ != nullptr) return absl::OkStatus();
  if (data_ != nullptr) {
    KOLO_RETURN_IF_CUDA_ERROR(cudaFree(data_), "cudaFree of the fusion buffer");
    data_ = nullptr;
    size_ = 0;
  }
  void* p = nullptr;
  const size_t want = bytes == 0 ? 256 : bytes;
  KOLO_RETURN_IF_CUDA_ERROR(cudaMalloc(&p, want), absl::StrCat("cudaMalloc of ", want, " bytes"));
  data_ = static_cast<uint8_t*>(p);
  size_ = want;
  return absl::OkStatus();
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

absl::Status PinnedBuffer::Reserve(size_t bytes) {
  if (bytes <= size_ && data_ != nullptr) return absl::OkStatus();
  if (data_ != nullptr) {
    KOLO_RETURN_IF_CUDA_ERROR(cudaFreeHost(data_), "cudaFreeHost");
    data_ = nullptr;
    size_ = 0;
  }
  void* p = nullptr;
  const size_t want = bytes == 0 ? 256 : bytes;
  KOLO_RETURN_IF_CUDA_ERROR(cudaMallocHost(&p, want),
                            absl::StrCat("cudaMallocHost of ", want, " bytes"));
  data_ = static_cast<uint8_t*>(p);
  size_ = want;
  return absl::OkStatus();
}

}  // namespace kolo::cuda
