// The device backend factory of a kolod built without CUDA or NCCL: every
// device request fails with UNIMPLEMENTED.
#include "daemon/backend/device_backend.h"

#include "absl/status/status.h"

namespace kolo::daemon {
namespace {

absl::Status NoCuda() {
  return absl::UnimplementedError(
      "device tensors: this kolod was built without CUDA (rebuild it where the "
      "CUDA toolkit and NCCL are installed)");
}

class NoDeviceBackendFactory : public DeviceBackendFactory {
 public:
  absl::StatusOr<std::string> NewCommId() override { return NoCuda(); }
  absl::StatusOr<std::unique_ptr<DeviceBackend>> Create(
      const DeviceBackendOptions& /*options*/) override {
    return NoCuda();
  }
};

}  // namespace

std::unique_ptr<DeviceBackendFactory> MakeNoDeviceBackendFactory() {
  return std::make_unique<NoDeviceBackendFactory>();
}

}  // namespace kolo::daemon
