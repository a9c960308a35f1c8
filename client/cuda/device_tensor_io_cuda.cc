// DeviceTensorIo of a libkolo built with CUDA: tensors travel to kolod as
// CUDA IPC handles (DeviceTensorExporter), ordered with the caller's stream
// by an interprocess event pair per request (EventPool): `ready` recorded on
// the caller's stream before submission, `done` recorded by kolod after it
// wrote the output; on completion the caller's stream waits on `done`.
#include <cstring>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/cuda/device_tensor_export.h"
#include "client/device_tensor_io.h"
#include "client/visible_devices.h"
#include "common/cuda/cuda_status.h"

namespace kolo::client {
namespace {

void CopyRef(const kolo::cuda::DeviceTensorRef& ref, abi::v1::DeviceTensorSlot* t) {
  static_assert(sizeof(t->memory_handle) == kolo::cuda::kIpcHandleBytes);
  std::memcpy(t->memory_handle, ref.memory.data(), sizeof(t->memory_handle));
  std::memcpy(t->event_handle, ref.event.data(), sizeof(t->event_handle));
  t->offset = ref.offset;
  t->bytes = ref.bytes;
  t->device = ref.device;
}

class CudaDevicePending : public DevicePending {
 public:
  CudaDevicePending(cuda::EventPool* pool, std::unique_ptr<cuda::EventPair> pair,
                    cudaStream_t stream, int device)
      : pool_(pool), pair_(std::move(pair)), stream_(stream), device_(device) {}
  ~CudaDevicePending() override {
    // A request never completed (the daemon died): its events may still be
    // named by kolod, so they are not reused.
  }

  absl::Status Complete(const absl::Status& status) override {
    absl::Status waited;
    if (status.ok()) {
      waited = kolo::cuda::CudaStatus(cudaSetDevice(device_), "cudaSetDevice");
      if (waited.ok()) waited = cuda::WaitDone(*pair_, stream_);
    }
    // kolod recorded `done` and saw it complete before it wrote the
    // completion, and the wait above has been enqueued: the pair is free.
    pool_->Release(std::move(pair_));
    return waited;
  }

 private:
  cuda::EventPool* const pool_;
  std::unique_ptr<cuda::EventPair> pair_;
  const cudaStream_t stream_;
  const int device_;
};

class CudaDeviceTensorIo : public DeviceTensorIo {
 public:
  absl::StatusOr<std::unique_ptr<DevicePending>> Prepare(const void* input, uint64_t input_bytes,
                                                         void* output, uint64_t output_bytes,
                                                         int device, void* stream,
                                                         abi::v1::SubmitSlot* slot) override {
    if (absl::Status s = kolo::cuda::CudaStatus(
            cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ") for a tensor"));
        !s.ok()) {
      return s;
    }
    cuda::EventPool* pool = PoolFor(device);
    absl::StatusOr<std::unique_ptr<cuda::EventPair>> pair = pool->Acquire();
    if (!pair.ok()) return pair.status();
    absl::StatusOr<kolo::cuda::DeviceTensorRef> in =
        exporter_.Export(input, input_bytes, (*pair)->ready_handle);
    if (!in.ok()) return Give(pool, std::move(*pair), in.status());
    absl::StatusOr<kolo::cuda::DeviceTensorRef> out =
        exporter_.Export(output, output_bytes, (*pair)->done_handle);
    if (!out.ok()) return Give(pool, std::move(*pair), out.status());
    if (in->device != device || out->device != device) {
      return Give(pool, std::move(*pair),
                  absl::InvalidArgumentError(absl::StrCat(
                      "the tensor view says CUDA device ", device, ", its memory is on device ",
                      in->device, " (input) and ", out->device, " (output)")));
    }
    const auto cuda_stream = static_cast<cudaStream_t>(stream);
    if (absl::Status s = cuda::RecordReady(**pair, cuda_stream); !s.ok()) {
      return Give(pool, std::move(*pair), s);
    }
    // kolod numbers the node's GPUs; this process may see a subset.
    absl::StatusOr<int> node_ordinal = visible_.NodeOrdinal(device);
    if (!node_ordinal.ok()) return Give(pool, std::move(*pair), node_ordinal.status());
    in->device = out->device = *node_ordinal;
    slot->flags |= abi::v1::kSlotFlagDevice;
    CopyRef(*in, &slot->device_input);
    CopyRef(*out, &slot->device_output);
    return std::make_unique<CudaDevicePending>(pool, std::move(*pair), cuda_stream, device);
  }

 private:
  static absl::Status Give(cuda::EventPool* pool, std::unique_ptr<cuda::EventPair> pair,
                           absl::Status why) {
    pool->Release(std::move(pair));
    return why;
  }

  // Events belong to the device they were created on: one pool per device.
  cuda::EventPool* PoolFor(int device) {
    absl::MutexLock lock(&mu_);
    std::unique_ptr<cuda::EventPool>& pool = pools_[device];
    if (pool == nullptr) pool = std::make_unique<cuda::EventPool>();
    return pool.get();
  }

  const VisibleDevices visible_ =
      VisibleDevices::Parse(std::getenv("CUDA_VISIBLE_DEVICES") != nullptr
                                ? std::optional<std::string>(std::getenv("CUDA_VISIBLE_DEVICES"))
                                : std::nullopt);
  cuda::DeviceTensorExporter exporter_;
  absl::Mutex mu_;
  absl::flat_hash_map<int, std::unique_ptr<cuda::EventPool>> pools_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<DeviceTensorIo> MakeDeviceTensorIo() {
  return std::make_unique<CudaDeviceTensorIo>();
}

}  // namespace kolo::client
