// A job that spans two daemons, in one process: node A hosts rank 0 and the
// job's coordinator (the real Coordinator, reached directly), node B hosts
// rank 1 and reaches it over the real Peer gRPC service on loopback.
//
// Device tensors: the device backends are fakes (no GPU here); the tests
// check what every daemon is told to build and run — the same NCCL unique id
// and rank layout on both nodes, the same responses in the same order — and
// that a node that cannot run device tensors ends the job on every node at
// once instead of leaving the other one waiting in NCCL. Joining: a node
// that arrives before rank 0's node waits for it, and cannot choose the
// job's token.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/wait_until.h"
#include "daemon/backend/fake_backend.h"
#include "daemon/backend/fake_device_backend.h"
#include "daemon/job/default_negotiators.h"
#include "daemon/job/job.h"
#include "daemon/session/loopback_session.h"
#include "daemon/transport/in_process_transport.h"
#include "daemon/wire/loopback_coordinator.h"
#include "daemon/wire/peer_tls.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

const auto kPlaintext = std::make_shared<const PeerCredentials>(PeerCredentials::Plaintext());

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr uint64_t kFusionThreshold = 64 << 20;

// Each test runs over the Peer plane only and with data-plane lanes (as
// over UCX: the steady state leaves the stream, direct rounds for cached
// names).
class MultiNodeJobTest : public ::testing::TestWithParam<bool> {
 protected:
  // Starts the coordinator registry (with `coordinator_ids` making the NCCL
  // ids, or none), its Peer service and the two nodes' jobs (node B's with
  // `b_token`; node B first when `b_first`).
  void Start(DeviceBackendFactory* coordinator_ids, const std::string& b_token = "token",
             bool b_first = false) {
    CoordinatorOptions options;
    if (coordinator_ids != nullptr) {
      options.new_device_comm_id = [coordinator_ids] { return coordinator_ids->NewCommId(); };
    }
    coordinator_ = std::make_unique<LoopbackCoordinator>(options);
    ASSERT_TRUE(coordinator_->ok());

    for (int r = 0; r < 2; ++r) {
      auto s = LoopbackSession::Create("job-mn", r);
      ASSERT_TRUE(s.ok()) << s.status();
      sessions_.push_back(std::move(*s));
    }
    JobLayout a;
    a.local_size = 1;
    a.env.node_name = "nodeA";
    a.env.coordinators = coordinator_->registry();
    a.env.peer_timeout = absl::Seconds(10);
    a.env.transports = &transports_;
    a.env.peer_credentials = kPlaintext;
    JobLayout b;
    b.local_size = 1;
    b.coordinator = coordinator_->address();
    b.env.node_name = "nodeB";
    b.env.peer_timeout = absl::Seconds(10);
    b.env.transports = &transports_;
    b.env.peer_credentials = kPlaintext;
    jobs_.push_back(std::make_unique<Job>("job-mn", "token", 2, &host_, kFusionThreshold,
                                          DefaultNegotiators(), JobObservers{}, a, &factories_[0]));
    jobs_.push_back(std::make_unique<Job>("job-mn", b_token, 2, &host_, kFusionThreshold,
                                          DefaultNegotiators(), JobObservers{}, b, &factories_[1]));
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(jobs_[r]->AttachRank(r, absl::StrCat("session-", r), 100 + r).ok());
    }
    if (b_first) {
      // Node B's Hello waits in the Peer service until node A's job starts.
      std::thread b([this] { jobs_[1]->MaybeStart(); });
      EXPECT_TRUE(coordinator_->registry()->AwaitWaiters(1, absl::Seconds(10)));
      jobs_[0]->MaybeStart();
      b.join();
    } else {
      jobs_[0]->MaybeStart();
      jobs_[1]->MaybeStart();
    }
  }

  void TearDown() override {
    jobs_.clear();  // before the coordinator's service goes
    coordinator_.reset();
  }

  Request MakeRequest(int rank, const std::string& name, int device,
                      CollectiveKind kind = CollectiveKind::kAllreduce) {
    return FakeRequest(next_request_id_++, rank, name, device, sessions_[rank]->session(), kind);
  }

  // Waits (up to 20 s) for `n` completions of `rank`.
  std::vector<ReceivedCompletion> WaitForCompletions(int rank, size_t n) {
    std::vector<ReceivedCompletion> got;
    WaitUntil(
        [&] {
          for (ReceivedCompletion& c : sessions_[rank]->TakeCompletions()) got.push_back(c);
          return got.size() >= n;
        },
        absl::Seconds(20));
    return got;
  }

  FakeBackend host_;
  // The nodes' data moves over an in-process fabric.
  InProcessFabric fabric_{2, /*lanes=*/GetParam()};
  InProcessTransportFactory transports_{&fabric_};
  FakeDeviceBackendFactory factories_[2];  // node A's, node B's
  std::unique_ptr<LoopbackCoordinator> coordinator_;
  std::vector<std::unique_ptr<LoopbackSession>> sessions_;
  std::vector<std::unique_ptr<Job>> jobs_;  // declared last: destroyed first
  uint64_t next_request_id_ = 1;
};

TEST_P(MultiNodeJobTest, EveryNodeJoinsOneCommunicatorAndRunsThePlanInOrder) {
  Start(&factories_[0]);
  // Rank 0 on node A's GPU 1, rank 1 on node B's GPU 0.
  const int kTensors = 20;
  for (int i = 0; i < kTensors; ++i) {
    const std::string name = absl::StrCat("grad/", i);
    const CollectiveKind kind =
        i % 5 == 4 ? CollectiveKind::kBroadcast : CollectiveKind::kAllreduce;
    jobs_[0]->Submit(MakeRequest(0, name, 1, kind));
    jobs_[1]->Submit(MakeRequest(1, name, 0, kind));
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<ReceivedCompletion> got = WaitForCompletions(r, kTensors);
    ASSERT_EQ(got.size(), static_cast<size_t>(kTensors)) << "rank " << r;
    for (const ReceivedCompletion& c : got) EXPECT_EQ(c.code, absl::StatusCode::kOk) << c.message;
  }
  for (int n = 0; n < 2; ++n) {
    const FakeDeviceBackendFactory& f = factories_[n];
    ASSERT_EQ(f.created_, 1) << "node " << n;
    // One id, made by the coordinator's daemon (node A) and sent to node B.
    EXPECT_EQ(f.last_options_.comm.unique_id, "unique-id-1") << "node " << n;
    EXPECT_EQ(f.last_options_.comm.nranks, 2);
    EXPECT_THAT(f.last_options_.comm.nccl_rank, ElementsAre(0, 1));
    EXPECT_THAT(f.last_options_.comm.device, ElementsAre(1, 0));
    EXPECT_THAT(f.last_options_.local_ranks, ElementsAre(n));
  }
  EXPECT_EQ(factories_[1].ids_, 0);  // node B made none
  std::vector<std::string> a = factories_[0].made_->executed();
  std::vector<std::string> b = factories_[1].made_->executed();
  EXPECT_EQ(a.size(), static_cast<size_t>(kTensors));
  EXPECT_EQ(a, b);  // the same responses, in the same order, on both nodes
}

TEST_P(MultiNodeJobTest, DeviceOnOneNodeHostOnTheOtherIsAMismatch) {
  Start(&factories_[0]);
  jobs_[0]->Submit(MakeRequest(0, "grad/mixed", 0));
  jobs_[1]->Submit(MakeRequest(1, "grad/mixed", -1));
  for (int r = 0; r < 2; ++r) {
    std::vector<ReceivedCompletion> got = WaitForCompletions(r, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].code, absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(got[0].message, HasSubstr("in host memory"));
    EXPECT_THAT(got[0].message, HasSubstr("in device memory"));
  }
  EXPECT_EQ(factories_[0].created_, 0);
  EXPECT_EQ(factories_[1].created_, 0);
}

TEST_P(MultiNodeJobTest, ANodeThatCannotRunDeviceTensorsEndsTheJobEverywhere) {
  factories_[1].error_ = absl::FailedPreconditionError("CUDA device 0 does not exist");
  Start(&factories_[0]);
  const absl::Time start = absl::Now();
  jobs_[0]->Submit(MakeRequest(0, "grad/a", 0));
  jobs_[1]->Submit(MakeRequest(1, "grad/a", 0));
  std::vector<ReceivedCompletion> b = WaitForCompletions(1, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].code, absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(b[0].message, HasSubstr("CUDA device 0 does not exist"));
  // Node A's backend (a fake) ran; with NCCL it would now wait for node B,
  // so node B ends the job and node A learns it over the peer link.
  WaitUntil([&] { return jobs_[0]->Snapshot().aborted; }, absl::Seconds(10));
  JobSnapshot a = jobs_[0]->Snapshot();
  ASSERT_TRUE(a.aborted);
  EXPECT_THAT(a.error, HasSubstr("node nodeB"));
  EXPECT_THAT(a.error, HasSubstr("CUDA device 0 does not exist"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_NE(factories_[0].made_, nullptr);
  // The job marks itself aborted before it aborts its device backend.
  EXPECT_TRUE(WaitUntil([&] { return !factories_[0].made_->aborted().ok(); }, absl::Seconds(10)));
  EXPECT_THAT(factories_[0].made_->aborted().message(), HasSubstr("nodeB"));
}

TEST_P(MultiNodeJobTest, ACoordinatorWithoutNcclFailsDeviceTensorsClearly) {
  Start(nullptr);
  for (int round = 0; round < 2; ++round) {
    const std::string name = absl::StrCat("grad/", round);
    jobs_[0]->Submit(MakeRequest(0, name, 0));
    jobs_[1]->Submit(MakeRequest(1, name, 0));
    for (int r = 0; r < 2; ++r) {
      std::vector<ReceivedCompletion> got = WaitForCompletions(r, 1);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_EQ(got[0].code, absl::StatusCode::kUnimplemented);
      EXPECT_THAT(got[0].message, HasSubstr("cannot make NCCL communicators"));
    }
  }
  EXPECT_EQ(factories_[0].created_, 0);
  EXPECT_EQ(factories_[1].created_, 0);
  EXPECT_FALSE(jobs_[0]->Snapshot().aborted);
}

TEST_P(MultiNodeJobTest, ANodeThatComesFirstWaitsForRankZerosNode) {
  Start(&factories_[0], "token", /*b_first=*/true);
  jobs_[0]->Submit(MakeRequest(0, "grad/a", 0));
  jobs_[1]->Submit(MakeRequest(1, "grad/a", 0));
  for (int r = 0; r < 2; ++r) {
    std::vector<ReceivedCompletion> got = WaitForCompletions(r, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].code, absl::StatusCode::kOk) << got[0].message;
  }
}

TEST_P(MultiNodeJobTest, ANodeThatComesFirstCannotChooseTheToken) {
  // Node B presents another token and arrives first: the coordinator is
  // still made with node A's (rank 0's) token, and node B is refused.
  Start(&factories_[0], "not-the-token", /*b_first=*/true);
  WaitUntil([&] { return jobs_[1]->Snapshot().aborted; }, absl::Seconds(10));
  JobSnapshot b = jobs_[1]->Snapshot();
  ASSERT_TRUE(b.aborted);
  EXPECT_THAT(b.error, HasSubstr("wrong job token"));
  EXPECT_FALSE(jobs_[0]->Snapshot().aborted);
}

TEST_P(MultiNodeJobTest, CollectivesAcrossNodesReachTheFlightRecorderAndCounters) {
  Start(&factories_[0]);
  Request a = MakeRequest(0, "sync", -1, CollectiveKind::kBarrier);
  Request b = MakeRequest(1, "sync", -1, CollectiveKind::kBarrier);
  a.bytes = b.bytes = 0;
  a.shape = b.shape = {};
  jobs_[0]->Submit(std::move(a));
  jobs_[1]->Submit(std::move(b));
  jobs_[0]->Submit(MakeRequest(0, "grad/dev", 0));
  jobs_[1]->Submit(MakeRequest(1, "grad/dev", 0));
  for (int r = 0; r < 2; ++r) {
    std::vector<ReceivedCompletion> got = WaitForCompletions(r, 2);
    ASSERT_EQ(got.size(), 2u);
    for (const ReceivedCompletion& c : got) EXPECT_EQ(c.code, absl::StatusCode::kOk) << c.message;
  }
  std::vector<std::vector<std::string>> ran(2);
  for (int n = 0; n < 2; ++n) {
    JobSnapshot snap = jobs_[n]->Snapshot(/*with_history=*/true);
    EXPECT_EQ(snap.responses, 2u) << "node " << n;
    // A node keeps per-rank state for its own ranks only.
    ASSERT_EQ(snap.ranks.size(), 1u) << "node " << n;
    EXPECT_EQ(snap.ranks[0].rank, n);
    EXPECT_EQ(snap.ranks[0].completed, 2u) << "node " << n;
    std::vector<std::string> names;
    for (const CollectiveRecord& rec : snap.recent) names.push_back(rec.name);
    // The two names are independent: the plan may order them either way
    // (the reports of one node can overtake one another), but alike on
    // both nodes.
    EXPECT_THAT(names, UnorderedElementsAre("sync", "grad/dev")) << "node " << n;
    ran[n] = names;
  }
  EXPECT_EQ(ran[0], ran[1]);
}

INSTANTIATE_TEST_SUITE_P(Negotiation, MultiNodeJobTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "DataPlaneLanes" : "PeerPlaneOnly";
                         });

}  // namespace
}  // namespace kolo::daemon
