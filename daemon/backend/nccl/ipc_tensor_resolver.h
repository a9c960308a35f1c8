// IpcTensorResolver: resolves DeviceTensorRefs through per-session
// IpcMappingCaches. The request's cuda::DeviceIo is read through an accessor the
// daemon supplies (see the integration notes in nccl_backend.h), so this code
// does not depend on where Request keeps it.
//
// Thread-safety: thread-safe. Resolve runs on executor threads;
// ReleaseSession on whichever thread ends a session.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/cuda/device_tensor.h"
#include "common/cuda/ipc_mapping.h"
#include "daemon/backend/nccl/device_tensor_resolver.h"

namespace kolo::daemon::nccl {

class IpcTensorResolver : public DeviceTensorResolver {
 public:
  // Returns the request's device tensors, or null for a host request.
  using DeviceIoOf = std::function<const cuda::DeviceIo*(const Request&)>;

  IpcTensorResolver(DeviceIoOf device_io_of, size_t max_entries_per_session = 4096)
      : device_io_of_(std::move(device_io_of)), max_entries_(max_entries_per_session) {}

  absl::StatusOr<ResolvedIo> Resolve(const Request& request) override;

  // The session teardown hook: drops the session's mappings and events
  // (each closes when no running collective holds it any more).
  void ReleaseSession(const std::string& session_id);
  size_t sessions() const;

 private:
  std::shared_ptr<cuda::IpcMappingCache> CacheFor(const std::string& session_id);

  const DeviceIoOf device_io_of_;
  const size_t max_entries_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<cuda::IpcMappingCache>> caches_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace kolo::daemon::nccl
