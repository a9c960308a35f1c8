// Tests of how a Job picks a backend per response: device responses go to
// the device backend it makes (once) through the DeviceBackendFactory seam,
// host ones to the host backend; a factory that cannot make one fails the
// device requests with its error and leaves host ones alone; leaving ranks
// release their session's IPC mappings; the job plans one NCCL rank per GPU
// its ranks use; aborting the job aborts the device backend.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "daemon/backend/device_backend.h"
#include "daemon/backend/fake_backend.h"
#include "daemon/backend/fake_device_backend.h"
#include "daemon/job/default_negotiators.h"
#include "daemon/job/job.h"
#include "daemon/session/loopback_session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr uint64_t kFusionThreshold = 64 << 20;

class JobDeviceBackendTest : public ::testing::Test {
 protected:
  void MakeJob(int size, DeviceBackendFactory* factory, JobLayout layout = {}) {
    for (int r = 0; r < size; ++r) {
      auto s = LoopbackSession::Create("job-gpu", r);
      ASSERT_TRUE(s.ok()) << s.status();
      sessions_.push_back(std::move(*s));
    }
    job_ = std::make_unique<Job>("job-gpu", "token", size, &host_, kFusionThreshold,
                                 DefaultNegotiators(), JobObservers{}, layout, factory);
    const int local = layout.local_size > 0 ? layout.local_size : size;
    for (int r = 0; r < local; ++r) {
      ASSERT_TRUE(job_->AttachRank(r, "session-" + std::to_string(r), 100 + r).ok());
    }
    job_->MaybeStart();
  }

  Request MakeRequest(int rank, const std::string& name, int device) {
    return FakeRequest(next_request_id_++, rank, name, device, sessions_[rank]->session());
  }

  std::vector<ReceivedCompletion> Completions(int rank) {
    return sessions_[rank]->TakeCompletions();
  }

  FakeBackend host_;
  std::vector<std::unique_ptr<LoopbackSession>> sessions_;
  std::unique_ptr<Job> job_;  // declared last: destroyed before the rest
  uint64_t next_request_id_ = 1;
};

TEST_F(JobDeviceBackendTest, DeviceResponsesGoToTheDeviceBackendHostOnesToTheHost) {
  FakeDeviceBackendFactory factory;
  MakeJob(2, &factory);
  for (int r = 0; r < 2; ++r) job_->Submit(MakeRequest(r, "host/a", -1));
  for (int r = 0; r < 2; ++r) job_->Submit(MakeRequest(r, "gpu/a", 0));
  for (int r = 0; r < 2; ++r) job_->Submit(MakeRequest(r, "gpu/b", 0));
  for (int r = 0; r < 2; ++r) job_->Submit(MakeRequest(r, "host/b", -1));

  ASSERT_NE(factory.made_, nullptr);
  EXPECT_EQ(factory.created_, 1);  // made once, on the first device response
  EXPECT_EQ(factory.last_options_.job_id, "job-gpu");
  // Both ranks on GPU 0: one NCCL rank, driven by this daemon.
  EXPECT_EQ(factory.last_options_.comm.unique_id, "unique-id-1");
  EXPECT_EQ(factory.last_options_.comm.nranks, 1);
  EXPECT_THAT(factory.last_options_.comm.nccl_rank, ElementsAre(0, 0));
  EXPECT_THAT(factory.last_options_.local_ranks, ElementsAre(0, 1));
  EXPECT_THAT(factory.made_->executed(), ElementsAre("gpu/a", "gpu/b"));
  std::vector<std::string> host_ran;
  for (const auto& names : host_.executed()) {
    for (const std::string& n : names) host_ran.push_back(n);
  }
  EXPECT_THAT(host_ran, ElementsAre("host/a", "host/b"));
  for (int r = 0; r < 2; ++r) {
    std::vector<ReceivedCompletion> got = Completions(r);
    ASSERT_EQ(got.size(), 4u);
    for (const ReceivedCompletion& c : got) EXPECT_EQ(c.code, absl::StatusCode::kOk) << c.message;
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
    EXPECT_EQ(got[0].message,
              "allreduce \"grad/mixed\": rank 1 sent a tensor "
              "in host memory, rank 0 sent a "
              "tensor on CUDA device 0");
  }
  EXPECT_EQ(factory.created_, 0);
  EXPECT_THAT(host_.executed(), IsEmpty());
}

TEST_F(JobDeviceBackendTest, WithoutCudaDeviceRequestsFailClearlyAndHostOnesRun) {
  std::unique_ptr<DeviceBackendFactory> none = MakeNoDeviceBackendFactory();
  MakeJob(2, none.get());
  for (int round = 0; round < 2; ++round) {
    for (int r = 0; r < 2; ++r) job_->Submit(MakeRequest(r, "gpu/a", 0));
    for (int r = 0; r < 2; ++r) {
      std::vector<ReceivedCompletion> got = Completions(r);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_EQ(got[0].code, absl::StatusCode::kUnimplemented);
      EXPECT_TRUE(absl::StrContains(got[0].message, "this kolod was built without CUDA"))
          << got[0].message;
    }
  }
  for (int r = 0; r < 2; ++r) job_->Submit(MakeRequest(r, "host/a", -1));
  for (int r = 0; r < 2; ++r) {
    std::vector<ReceivedCompletion> got = Completions(r);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].code, absl::StatusCode::kOk) << got[0].message;
  }
  EXPECT_FALSE(job_->Snapshot().aborted);
}

TEST_F(JobDeviceBackendTest, AFailedDeviceBackendIsMadeOnceAndItsErrorRepeated) {
  FakeDeviceBackendFactory factory;
  factory.error_ = absl::FailedPreconditionError("CUDA device 0 does not exist: 0 visible");
  MakeJob(1, &factory);
  job_->Submit(MakeRequest(0, "gpu/a", 0));
  job_->Submit(MakeRequest(0, "gpu/b", 0));
  std::vector<ReceivedCompletion> got = Completions(0);
  ASSERT_EQ(got.size(), 2u);
  for (const ReceivedCompletion& c : got) {
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
  for (int r = 0; r < 2; ++r) job_->Submit(MakeRequest(r, "gpu/a", 0));
  ASSERT_NE(factory.made_, nullptr);
  job_->RankLeft(1, /*clean=*/true, absl::OkStatus());
  EXPECT_THAT(factory.made_->released(), ElementsAre("session-1"));
}

TEST_F(JobDeviceBackendTest, RanksOnSeveralGpusGetOneNcclRankPerGpu) {
  FakeDeviceBackendFactory factory;
  MakeJob(4, &factory);
  const int gpu_of_rank[] = {1, 0, 1, 0};
  for (int r = 0; r < 4; ++r) job_->Submit(MakeRequest(r, "gpu/a", gpu_of_rank[r]));
  ASSERT_NE(factory.made_, nullptr);
  EXPECT_EQ(factory.last_options_.comm.nranks, 2);
  EXPECT_THAT(factory.last_options_.comm.nccl_rank, ElementsAre(1, 0, 1, 0));
  EXPECT_THAT(factory.last_options_.comm.device, ElementsAre(1, 0, 1, 0));
  EXPECT_THAT(factory.made_->executed(), ElementsAre("gpu/a"));
  for (int r = 0; r < 4; ++r) {
    std::vector<ReceivedCompletion> got = Completions(r);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].code, absl::StatusCode::kOk) << got[0].message;
  }
}

TEST_F(JobDeviceBackendTest, DeviceTensorsOfAProcessSetAreRefused) {
  FakeDeviceBackendFactory factory;
  MakeJob(2, &factory);
  Request r = MakeRequest(0, "gpu/ps", 0);
  r.process_set = 1;
  job_->Submit(std::move(r));
  std::vector<ReceivedCompletion> got = Completions(0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code, absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(got[0].message, "not on process set 1")) << got[0].message;
}

// A device reducescatter's output must hold the rank's rows exactly: [4]
// over 2 ranks is 2 rows (8 bytes) each. A wrong size is refused when the
// request arrives, not found by the device backend (which, across nodes,
// would have to end the job).
TEST_F(JobDeviceBackendTest, ADeviceReducescatterOutputOfTheWrongSizeIsRefused) {
  FakeDeviceBackendFactory factory;
  MakeJob(2, &factory);
  Request r = FakeRequest(next_request_id_++, 0, "gpu/rs", 0, sessions_[0]->session(),
                          CollectiveKind::kReducescatter);
  job_->Submit(std::move(r));  // output of 16 bytes
  std::vector<ReceivedCompletion> got = Completions(0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code, absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(got[0].message,
                                "device output has 16 bytes; its rows of the "
                                "result have 8"))
      << got[0].message;
  for (int rank : {0, 1}) {
    Request ok = FakeRequest(next_request_id_++, rank, "gpu/rs2", 0, sessions_[rank]->session(),
                             CollectiveKind::kReducescatter);
    ok.device->output.bytes = 8;
    job_->Submit(std::move(ok));
  }
  for (int rank : {0, 1}) {
    got = Completions(rank);
    ASSERT_EQ(got.size(), 1u) << "rank " << rank;
    EXPECT_EQ(got[0].code, absl::StatusCode::kOk) << got[0].message;
  }
}

TEST_F(JobDeviceBackendTest, AbortingTheJobAbortsTheDeviceBackend) {
  FakeDeviceBackendFactory factory;
  MakeJob(2, &factory);
  for (int r = 0; r < 2; ++r) job_->Submit(MakeRequest(r, "gpu/a", 0));
  ASSERT_NE(factory.made_, nullptr);
  ASSERT_NE(factory.last_options_.cancel, nullptr);
  EXPECT_FALSE(factory.last_options_.cancel->load());
  job_->Abort(absl::AbortedError("operator said so"));
  EXPECT_EQ(factory.made_->aborted().message(), "operator said so");
  // A backend still joining its communicator would stop waiting too.
  EXPECT_TRUE(factory.last_options_.cancel->load());
}

}  // namespace
}  // namespace kolo::daemon
