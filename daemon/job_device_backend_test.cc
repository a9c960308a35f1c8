// Tests of how a Job picks a backend per response: device responses go to
// the device backend it makes (once) through the DeviceBackendFactory seam,
// host ones to the host backend; a factory that cannot make one fails the
// device requests with its error and leaves host ones alone; leaving ranks
// release their session's IPC mappings; multi-node jobs refuse device
// tensors.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "daemon/backend/device_backend.h"
#include "daemon/fake_backend.h"
#include "daemon/job.h"
#include "daemon/loopback_session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr uint64_t kFusionThreshold = 64 << 20;

// Records what ran on it and which sessions were released.
class FakeDeviceBackend : public DeviceBackend {
public:
  absl::string_view name() const override { return "fake-device"; }
  absl::Status Execute(Response &response) override {
    absl::MutexLock l(&mu_);
    for (const FusedMember &m : response.members)
      executed_.push_back(m.set.name);
    devices_.push_back(response.device);
    return absl::OkStatus();
  }
  void ReleaseSession(const std::string &session_id) override {
    absl::MutexLock l(&mu_);
    released_.push_back(session_id);
  }
  std::vector<std::string> executed() const {
    absl::MutexLock l(&mu_);
    return executed_;
  }
  std::vector<int> devices() const {
    absl::MutexLock l(&mu_);
    return devices_;
  }
  std::vector<std::string> released() const {
    absl::MutexLock l(&mu_);
    return released_;
  }

private:
  mutable absl::Mutex mu_;
  std::vector<std::string> executed_ ABSL_GUARDED_BY(mu_);
  std::vector<int> devices_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> released_ ABSL_GUARDED_BY(mu_);
};

// Hands out one FakeDeviceBackend (which the test keeps a pointer to), or
// fails with `error`.
class FakeDeviceBackendFactory : public DeviceBackendFactory {
public:
  absl::StatusOr<std::unique_ptr<DeviceBackend>>
  Create(const DeviceBackendOptions &options) override {
    ++created_;
    last_options_ = options;
    if (!error_.ok())
      return error_;
    auto backend = std::make_unique<FakeDeviceBackend>();
    made_ = backend.get();
    return backend;
  }
  absl::Status error_;
  int created_ = 0;
  DeviceBackendOptions last_options_;
  FakeDeviceBackend *made_ = nullptr;
};

class JobDeviceBackendTest : public ::testing::Test {
protected:
  void MakeJob(int size, DeviceBackendFactory *factory, JobLayout layout = {}) {
    for (int r = 0; r < size; ++r) {
      auto s = LoopbackSession::Create("job-gpu", r);
      ASSERT_TRUE(s.ok()) << s.status();
      sessions_.push_back(std::move(*s));
    }
    job_ = std::make_unique<Job>("job-gpu", "token", size, &host_,
                                 kFusionThreshold, JobObservers{}, layout,
                                 factory);
    const int local = layout.local_size > 0 ? layout.local_size : size;
    for (int r = 0; r < local; ++r) {
      ASSERT_TRUE(
          job_->AttachRank(r, "session-" + std::to_string(r), 100 + r).ok());
    }
  }

  // A float32 allreduce of 4 elements; with `device` >= 0 its tensors are
  // (made-up) CUDA IPC handles on that GPU. No backend here reads data.
  Request MakeRequest(int rank, const std::string &name, int device) {
    Request r;
    r.request_id = next_request_id_++;
    r.rank = rank;
    r.name = name;
    r.shape = {4};
    r.bytes = 16;
    if (device >= 0) {
      r.device = nccl::DeviceIo{};
      r.device->input.device = device;
      r.device->input.bytes = 16;
      r.device->output = r.device->input;
    }
    r.session = sessions_[rank]->session();
    r.submitted_at = absl::Now();
    return r;
  }

  std::vector<ReceivedCompletion> Completions(int rank) {
    return sessions_[rank]->TakeCompletions();
  }

  FakeBackend host_;
  std::vector<std::unique_ptr<LoopbackSession>> sessions_;
  std::unique_ptr<Job> job_; // declared last: destroyed before the rest
  uint64_t next_request_id_ = 1;
};

TEST_F(JobDeviceBackendTest,
       DeviceResponsesGoToTheDeviceBackendHostOnesToTheHost) {
  FakeDeviceBackendFactory factory;
  MakeJob(2, &factory);
  for (int r = 0; r < 2; ++r)
    job_->Submit(MakeRequest(r, "host/a", -1));
  for (int r = 0; r < 2; ++r)
    job_->Submit(MakeRequest(r, "gpu/a", 0));
  for (int r = 0; r < 2; ++r)
    job_->Submit(MakeRequest(r, "gpu/b", 0));
  for (int r = 0; r < 2; ++r)
    job_->Submit(MakeRequest(r, "host/b", -1));

  ASSERT_NE(factory.made_, nullptr);
  EXPECT_EQ(factory.created_, 1); // made once, on the first device response
  EXPECT_EQ(factory.last_options_.device, 0);
  EXPECT_EQ(factory.last_options_.job_id, "job-gpu");
  EXPECT_THAT(factory.made_->executed(), ElementsAre("gpu/a", "gpu/b"));
  EXPECT_THAT(factory.made_->devices(), ElementsAre(0, 0));
  std::vector<std::string> host_ran;
  for (const auto &names : host_.executed()) {
    for (const std::string &n : names)
      host_ran.push_back(n);
  }
  EXPECT_THAT(host_ran, ElementsAre("host/a", "host/b"));
  for (int r = 0; r < 2; ++r) {
    std::vector<ReceivedCompletion> got = Completions(r);
    ASSERT_EQ(got.size(), 4u);
    for (const ReceivedCompletion &c : got)
      EXPECT_EQ(c.code, absl::StatusCode::kOk) << c.message;
  }
}

TEST_F(JobDeviceBackendTest, MixedDeviceAndHostIsAMismatchNamingRanks) {
  FakeDeviceBackendFactory factory;
  MakeJob(2, &factory);
  job_->Submit(MakeRequest(0, "grad/mixed", 0));
  job_->Submit(MakeRequest(1, "grad/mixed", -1));
  for (int r = 0; r < 2; ++r) {
    std::vector<ReceivedCompletion> got = Completions(r);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].code, absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(got[0].message, "allreduce \"grad/mixed\": rank 1 sent a tensor "
                              "in host memory, rank 0 sent a "
                              "tensor on CUDA device 0");
  }
  EXPECT_EQ(factory.created_, 0);
  EXPECT_THAT(host_.executed(), IsEmpty());
}

TEST_F(JobDeviceBackendTest,
       WithoutCudaDeviceRequestsFailClearlyAndHostOnesRun) {
  std::unique_ptr<DeviceBackendFactory> none = MakeNoDeviceBackendFactory();
  MakeJob(2, none.get());
  for (int round = 0; round < 2; ++round) {
    for (int r = 0; r < 2; ++r)
      job_->Submit(MakeRequest(r, "gpu/a", 0));
    for (int r = 0; r < 2; ++r) {
      std::vector<ReceivedCompletion> got = Completions(r);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_EQ(got[0].code, absl::StatusCode::kUnimplemented);
      EXPECT_TRUE(absl::StrContains(got[0].message,
                                    "this kolod was built without CUDA"))
          << got[0].message;
    }
  }
  for (int r = 0; r < 2; ++r)
    job_->Submit(MakeRequest(r, "host/a", -1));
  for (int r = 0; r < 2; ++r) {
    std::vector<ReceivedCompletion> got = Completions(r);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].code, absl::StatusCode::kOk) << got[0].message;
  }
  EXPECT_FALSE(job_->Snapshot().aborted);
}

TEST_F(JobDeviceBackendTest,
       AFailedDeviceBackendIsMadeOnceAndItsErrorRepeated) {
  FakeDeviceBackendFactory factory;
  factory.error_ =
      absl::FailedPreconditionError("CUDA device 0 does not exist: 0 visible");
  MakeJob(1, &factory);
  job_->Submit(MakeRequest(0, "gpu/a", 0));
  job_->Submit(MakeRequest(0, "gpu/b", 0));
  std::vector<ReceivedCompletion> got = Completions(0);
  ASSERT_EQ(got.size(), 2u);
  for (const ReceivedCompletion &c : got) {
    EXPECT_EQ(c.code, absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(c.message, "CUDA device 0 does not exist: 0 visible");
  }
  EXPECT_EQ(factory.created_, 1);
}

TEST_F(JobDeviceBackendTest, NoFactoryMeansUnimplemented) {
  MakeJob(1, nullptr);
  job_->Submit(MakeRequest(0, "gpu/a", 0));
  std::vector<ReceivedCompletion> got = Completions(0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code, absl::StatusCode::kUnimplemented);
}

TEST_F(JobDeviceBackendTest, LeavingRankReleasesItsSessionMappings) {
  FakeDeviceBackendFactory factory;
  MakeJob(2, &factory);
  for (int r = 0; r < 2; ++r)
    job_->Submit(MakeRequest(r, "gpu/a", 0));
  ASSERT_NE(factory.made_, nullptr);
  job_->RankLeft(1, /*clean=*/true, absl::OkStatus());
  EXPECT_THAT(factory.made_->released(), ElementsAre("session-1"));
}

TEST_F(JobDeviceBackendTest, MultiNodeJobsRefuseDeviceTensors) {
  FakeDeviceBackendFactory factory;
  JobLayout layout;
  layout.local_size = 1; // of 2 ranks: the job spans nodes
  MakeJob(2, &factory, layout);
  job_->Submit(MakeRequest(0, "gpu/a", 0));
  std::vector<ReceivedCompletion> got = Completions(0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code, absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(got[0].message,
                                "device tensors are supported in single-node"))
      << got[0].message;
  EXPECT_EQ(factory.created_, 0);
}

} // namespace
} // namespace kolo::daemon
