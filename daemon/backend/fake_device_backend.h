// FakeDeviceBackend(Factory): the device backend seam of a Job for tests
// that run where no GPU is. The backend records the names it ran and the
// sessions it released and moves no data; the factory hands out
// "unique-id-N" communicator ids and records the options it was given.
//
// Thread-safety: FakeDeviceBackend is thread-safe; FakeDeviceBackendFactory
// is thread-safe (the test reads it once the job is quiet).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/backend/device_backend.h"
#include "daemon/core/request.h"

namespace kolo::daemon {

// A request for `name` of 4 float32 elements from `rank` of `session`:
// with `device` >= 0 its tensors are (made-up) CUDA IPC handles on that GPU,
// else host memory. No backend here reads the data.
inline Request FakeRequest(uint64_t request_id, int rank, const std::string& name, int device,
                           std::shared_ptr<RequestOrigin> session,
                           CollectiveKind kind = CollectiveKind::kAllreduce) {
  Request r;
  r.request_id = request_id;
  r.kind = kind;
  r.rank = rank;
  r.name = name;
  r.shape = {4};
  r.bytes = 16;
  if (device >= 0) {
    r.device = cuda::DeviceIo{};
    r.device->input.device = device;
    r.device->input.bytes = 16;
    r.device->output = r.device->input;
  }
  r.origin = std::move(session);
  r.submitted_at = absl::Now();
  return r;
}

// Records what ran on it and which sessions were released.
class FakeDeviceBackend : public DeviceBackend {
 public:
  absl::string_view name() const override { return "fake-device"; }
  absl::Status Execute(Response& response, const StepContext& /*step*/) override {
    absl::MutexLock l(&mu_);
    for (const FusedMember& m : response.members) executed_.push_back(m.set.name);
    return absl::OkStatus();
  }
  void Abort(const absl::Status& why) override {
    absl::MutexLock l(&mu_);
    aborted_ = why;
  }
  absl::Status aborted() const {
    absl::MutexLock l(&mu_);
    return aborted_;
  }
  void ReleaseSession(const std::string& session_id) override {
    absl::MutexLock l(&mu_);
    released_.push_back(session_id);
  }
  std::vector<std::string> executed() const {
    absl::MutexLock l(&mu_);
    return executed_;
  }
  std::vector<std::string> released() const {
    absl::MutexLock l(&mu_);
    return released_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> executed_ ABSL_GUARDED_BY(mu_);
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> released_ ABSL_GUARDED_BY(mu_);
};

// Hands out one FakeDeviceBackend (which the test keeps a pointer to), or
// fails with `error`.
class FakeDeviceBackendFactory : public DeviceBackendFactory {
 public:
  absl::StatusOr<std::string> NewCommId() override {
    absl::MutexLock l(&mu_);
    return "unique-id-" + std::to_string(++ids_);
  }
  absl::StatusOr<std::unique_ptr<DeviceBackend>> Create(
      const DeviceBackendOptions& options) override {
    absl::MutexLock l(&mu_);
    ++created_;
    last_options_ = options;
    if (!error_.ok()) return error_;
    auto backend = std::make_unique<FakeDeviceBackend>();
    made_ = backend.get();
    return backend;
  }
  // Set before the job runs; read once it is quiet.
  absl::Status error_;
  int ids_ = 0;
  int created_ = 0;
  DeviceBackendOptions last_options_;
  FakeDeviceBackend* made_ = nullptr;

 private:
  absl::Mutex mu_;
};

}  // namespace kolo::daemon
