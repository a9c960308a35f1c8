// DeviceTensorIo of a libkolo built without CUDA: device tensors are refused.
#include "absl/status/status.h"
#include "client/device_tensor_io.h"

namespace kolo::client {
namespace {

class NoDeviceTensorIo : public DeviceTensorIo {
 public:
  absl::StatusOr<std::unique_ptr<DevicePending>> Prepare(const void*, uint64_t, void*, uint64_t,
                                                         int, void*,
                                                         abi::v1::SubmitSlot*) override {
    return absl::UnimplementedError(
        "device tensors: libkolo was built without CUDA (rebuild it where the "
        "CUDA toolkit is "
        "installed)");
  }
};

}  // namespace

std::unique_ptr<DeviceTensorIo> MakeDeviceTensorIo() {
  return std::make_unique<NoDeviceTensorIo>();
}

}  // namespace kolo::client
