// PeerNegotiator on two nodes in one process: node A hosts rank 0 and the
// job's coordinator (reached directly), node B hosts rank 1 and reaches it
// over the real Peer gRPC service on loopback. The step runners are fakes
// that record what they were asked to run, so the tests look at the
// negotiator's decisions alone.
#include "daemon/negotiation/peer_negotiator.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/testing/wait_until.h"
#include "daemon/backend/fake_backend.h"
#include "daemon/backend/fake_device_backend.h"
#include "daemon/wire/loopback_coordinator.h"
#include "daemon/wire/peer_tls.h"
#include "daemon/transport/in_process_transport.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

// Records every call; when armed, holds the next collective step until the
// test releases it (a node still busy with an earlier response).
class RecordingRunner final : public StepRunner {
 public:
  void Run(PlannedStep step) override {
    bool block = false;
    {
      absl::MutexLock l(&mu_);
      std::string name = step.response.members.empty() ? std::string("(none)")
                                                       : step.response.members.front().set.name;
      ran_.push_back(name);
      if (step.kind == PlannedStep::Kind::kCollective && hold_next_) {
        hold_next_ = false;
        block = true;
      }
    }
    if (block) {
      held_.Notify();
      release_.WaitForNotification();
    }
  }
  void Fail(std::vector<ReadySet> sets, const absl::Status& status) override {
    absl::MutexLock l(&mu_);
    for (const ReadySet& s : sets) failed_.push_back(s.name + ": " + std::string(status.message()));
  }
  void AbortJob(const absl::Status& why) override {
    absl::MutexLock l(&mu_);
    aborted_ = why;
  }

  void HoldNextCollective() {
    absl::MutexLock l(&mu_);
    hold_next_ = true;
  }
  bool Held(absl::Duration within) { return held_.WaitForNotificationWithTimeout(within); }
  void Release() { release_.Notify(); }

  // Waits (bounded) until `ran` has `n` steps or the job was aborted here.
  bool AwaitRan(size_t n, absl::Duration within) {
    absl::MutexLock l(&mu_);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ran_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), within);
  }
  bool AwaitAborted(absl::Duration within) {
    absl::MutexLock l(&mu_);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !aborted_.ok(); };
    return mu_.AwaitWithTimeout(absl::Condition(&done), within);
  }
  std::vector<std::string> ran() {
    absl::MutexLock l(&mu_);
    return ran_;
  }
  std::vector<std::string> failed() {
    absl::MutexLock l(&mu_);
    return failed_;
  }

 private:
  absl::Mutex mu_;
  bool hold_next_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> ran_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> failed_ ABSL_GUARDED_BY(mu_);
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  absl::Notification held_;
  absl::Notification release_;
};

class PeerNegotiatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(coordinator_.ok());
    for (int node = 0; node < 2; ++node) {
      PeerNegotiatorOptions options;
      options.job_id = "job-pn";
      options.job_token = "token";
      options.size = 2;
      options.node_name = absl::StrCat("node", node);
      if (node == 0) {
        options.coordinators = coordinator_.registry();
      } else {
        options.coordinator_address = coordinator_.address();
      }
      options.peer_credentials =
          std::make_shared<const PeerCredentials>(PeerCredentials::Plaintext());
      options.transports = &transports_;
      options.make_host_backend = [](Transport*, std::vector<int>) {
        return std::make_unique<FakeBackend>();
      };
      negotiators_.push_back(std::make_unique<PeerNegotiator>(options, &runners_[node]));
    }
    ASSERT_TRUE(negotiators_[0]->Start({0}).ok());
    ASSERT_TRUE(negotiators_[1]->Start({1}).ok());
  }

  // Node `node`'s rank (its only one) has `name` of `kind` ready.
  void Ready(int node, const std::string& name, CollectiveKind kind) {
    ReadySet set;
    set.name = name;
    set.set_size = 2;
    set.first_submitted = set.ready_at = absl::Now();
    Request r = FakeRequest(++next_id_, node, name, -1, nullptr, kind);
    if (kind == CollectiveKind::kJoin) {
      set.process_set = -1;
      r.aux = {1};
    }
    set.requests.push_back(std::move(r));
    negotiators_[node]->LocallyReady(std::move(set));
  }

  InProcessFabric fabric_{2};
  InProcessTransportFactory transports_{&fabric_};
  LoopbackCoordinator coordinator_;
  RecordingRunner runners_[2];
  std::vector<std::unique_ptr<PeerNegotiator>> negotiators_;  // last: destroyed first
  uint64_t next_id_ = 0;
};

TEST_F(PeerNegotiatorTest, AJoinPlannedBeforeTheJobEndedStillCompletesOnASlowerNode) {
  // Node B is still running "x" when the coordinator plans the join and then
  // relays node A's end of the job (its rank finished and left). The join
  // was agreed before the end: node B completes it instead of failing it.
  runners_[1].HoldNextCollective();
  Ready(0, "x", CollectiveKind::kAllreduce);
  Ready(1, "x", CollectiveKind::kAllreduce);
  ASSERT_TRUE(runners_[1].Held(absl::Seconds(20)));
  Ready(0, "kolo.join", CollectiveKind::kJoin);
  Ready(1, "kolo.join", CollectiveKind::kJoin);
  ASSERT_TRUE(runners_[0].AwaitRan(2, absl::Seconds(20)));  // x, then the join, on node A
  negotiators_[0]->Abort(absl::AbortedError("job job-pn: rank 0 has shut down"));
  ASSERT_TRUE(runners_[1].AwaitAborted(absl::Seconds(20)));
  runners_[1].Release();
  ASSERT_TRUE(runners_[1].AwaitRan(2, absl::Seconds(20)));
  EXPECT_EQ(runners_[1].ran(), (std::vector<std::string>{"x", "kolo.join"}));
  EXPECT_TRUE(runners_[1].failed().empty()) << runners_[1].failed().front();
}

TEST_F(PeerNegotiatorTest, NamesNotPlannedWhenTheJobEndsFailWithItsReason) {
  Ready(0, "x", CollectiveKind::kAllreduce);
  Ready(1, "x", CollectiveKind::kAllreduce);
  ASSERT_TRUE(runners_[1].AwaitRan(1, absl::Seconds(20)));  // both nodes joined the job
  Ready(1, "y", CollectiveKind::kAllreduce);                // node A never submits "y"
  negotiators_[0]->Abort(absl::AbortedError("job job-pn: rank 0 has shut down"));
  ASSERT_TRUE(runners_[1].AwaitAborted(absl::Seconds(20)));
  WaitUntil([&] { return !runners_[1].failed().empty(); }, absl::Seconds(20));
  ASSERT_EQ(runners_[1].failed().size(), 1u);
  EXPECT_NE(runners_[1].failed().front().find("rank 0 has shut down"), std::string::npos)
      << runners_[1].failed().front();
  EXPECT_EQ(runners_[1].ran(), std::vector<std::string>{"x"});
}

}  // namespace
}  // namespace kolo::daemon
