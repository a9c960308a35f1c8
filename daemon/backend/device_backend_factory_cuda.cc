// The device backend factory of a kolod built with CUDA and NCCL: per job an
// NcclBackend over CUDA IPC tensors, one NCCL rank per GPU this daemon
// drives for the job (the ranks sharing a GPU are reduced there first).
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/backend/device_backend.h"
#include "daemon/backend/nccl/ipc_tensor_resolver.h"
#include "daemon/backend/nccl/nccl_backend.h"
#include "daemon/backend/nccl/nccl_communicator.h"

namespace kolo::daemon {
namespace {

class NcclDeviceBackend : public DeviceBackend {
 public:
  // `resolver` is the one `backend` was created with.
  NcclDeviceBackend(std::unique_ptr<nccl::IpcTensorResolver> resolver,
                    std::unique_ptr<nccl::NcclBackend> backend)
      : resolver_(std::move(resolver)), backend_(std::move(backend)) {}
  ~NcclDeviceBackend() override { backend_.reset(); }  // before the resolver

  absl::string_view name() const override { return backend_->name(); }
  absl::Status Execute(Response& response, const StepContext& step) override {
    return backend_->Execute(response, step);
  }
  void ReleaseSession(const std::string& session_id) override {
    resolver_->ReleaseSession(session_id);
  }
  void Abort(const absl::Status& why) override { backend_->Abort(why); }

 private:
  std::unique_ptr<nccl::IpcTensorResolver> resolver_;
  std::unique_ptr<nccl::NcclBackend> backend_;
};

class NcclDeviceBackendFactory : public DeviceBackendFactory {
 public:
  explicit NcclDeviceBackendFactory(DeviceBackendLimits limits) : limits_(limits) {}

  absl::StatusOr<std::string> NewCommId() override {
    absl::StatusOr<nccl::NcclUniqueIdBytes> id = nccl::NewNcclUniqueId();
    if (!id.ok()) return id.status();
    return std::string(id->data(), id->size());
  }

  absl::StatusOr<std::unique_ptr<DeviceBackend>> Create(
      const DeviceBackendOptions& options) override {
    auto resolver = std::make_unique<nccl::IpcTensorResolver>(
        [](const Request& r) { return r.device.has_value() ? &*r.device : nullptr; });
    nccl::NcclBackendOptions backend_options;
    backend_options.comm = options.comm;
    backend_options.local_ranks = options.local_ranks;
    backend_options.cancel = options.cancel;
    backend_options.init_timeout = limits_.init_timeout;
    backend_options.collective_timeout = limits_.collective_timeout;
    auto backend = nccl::NcclBackend::Create(backend_options, resolver.get());
    if (!backend.ok()) return Annotate(options, backend.status());
    return std::make_unique<NcclDeviceBackend>(std::move(resolver), *std::move(backend));
  }

 private:
  const DeviceBackendLimits limits_;

  static absl::Status Annotate(const DeviceBackendOptions& options, const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("job ", options.job_id,
                                               ": cannot start the NCCL backend: ", s.message()));
  }
};

}  // namespace

std::unique_ptr<DeviceBackendFactory> MakeDeviceBackendFactory(DeviceBackendLimits limits) {
  return std::make_unique<NcclDeviceBackendFactory>(limits);
}

}  // namespace kolo::daemon
