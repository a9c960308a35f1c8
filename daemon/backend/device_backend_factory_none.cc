// MakeDeviceBackendFactory of a kolod built without CUDA or NCCL.
#include "daemon/backend/device_backend.h"

namespace kolo::daemon {

std::unique_ptr<DeviceBackendFactory> MakeDeviceBackendFactory(DeviceBackendLimits /*limits*/) {
  return MakeNoDeviceBackendFactory();
}

}  // namespace kolo::daemon
