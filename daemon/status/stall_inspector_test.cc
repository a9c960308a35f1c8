#include "daemon/status/stall_inspector.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "daemon/backend/fake_backend.h"
#include "daemon/job/default_negotiators.h"
#include "daemon/job/job_registry.h"
#include "daemon/session/loopback_session.h"
#include "daemon/observe/metrics.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

constexpr int kSize = 3;

// The inspector's own thread inspects at the real time about once a second.
// Requests here are dated an hour back, so the thread sees exactly the stalls
// the test's own InspectOnce calls see (it would otherwise forget a reported
// stall that it does not see, and the count would depend on scheduling), and
// timeouts are longer than that hour, so only the test's explicit, later
// `now` can reach them.
constexpr absl::Duration kAge = absl::Hours(1);

class StallInspectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < kSize; ++r) {
      auto s = LoopbackSession::Create("job-1", r);
      ASSERT_TRUE(s.ok()) << s.status();
      sessions_.push_back(std::move(*s));
    }
    JobObservers observers;
    observers.metrics = &metrics_;
    registry_ = std::make_unique<JobRegistry>(&backend_, 64 << 20, DefaultNegotiators(), observers);
    for (int r = 0; r < kSize; ++r) {
      JoinRequest join;
      join.job_id = "job-1";
      join.job_token = "token";
      join.rank = r;
      join.size = kSize;
      join.session_id = "s";
      join.pid = 100 + r;
      auto job = registry_->Join(join);
      ASSERT_TRUE(job.ok()) << job.status();
      job_ = *job;
      job_->MaybeStart();  // as the node service does after each attach
    }
  }

  Request MakeRequest(int rank, const std::string& name, absl::Time at) {
    Request r;
    r.request_id = next_request_id_++;
    r.rank = rank;
    r.name = name;
    r.shape = {4};
    r.origin = sessions_[rank]->session();
    r.submitted_at = at;
    return r;
  }

  // Ranks 0 and 1 submit `name` `kAge` ago; rank 2 never does.
  absl::Time StallOn(const std::string& name) {
    const absl::Time at = absl::Now() - kAge;
    job_->Submit(MakeRequest(0, name, at));
    job_->Submit(MakeRequest(1, name, at));
    return at;
  }

  std::string StallsLine() {
    const std::string text = metrics_.Render();
    size_t at = text.find("\nkolo_stalls_total ");
    if (at == std::string::npos) return "<absent>";
    return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  }

  Metrics metrics_;
  FakeBackend backend_;
  std::vector<std::unique_ptr<LoopbackSession>> sessions_;
  std::unique_ptr<JobRegistry> registry_;
  std::shared_ptr<Job> job_;
  uint64_t next_request_id_ = 1;
};

TEST_F(StallInspectorTest, CountsAStallOnceAcrossInspections) {
  auto started = StallInspector::Start(registry_.get(), &metrics_,
                                       StallPolicy{absl::Seconds(60), absl::ZeroDuration()});
  ASSERT_TRUE(started.ok()) << started.status();
  StallInspector& inspector = **started;
  EXPECT_EQ(StallsLine(), "kolo_stalls_total 0");
  StallOn("grad/w1");
  EXPECT_EQ(StallsLine(), "kolo_stalls_total 0");  // not yet looked at
  inspector.InspectOnce(absl::Now());
  inspector.InspectOnce(absl::Now());
  inspector.InspectOnce(absl::Now() + absl::Minutes(5));
  EXPECT_EQ(StallsLine(), "kolo_stalls_total 1");
  // No timeout: the job keeps waiting.
  EXPECT_FALSE(job_->Snapshot().aborted);
}

TEST_F(StallInspectorTest, CountsEachDistinctStall) {
  auto started = StallInspector::Start(registry_.get(), &metrics_,
                                       StallPolicy{absl::Seconds(60), absl::ZeroDuration()});
  ASSERT_TRUE(started.ok()) << started.status();
  StallInspector& inspector = **started;
  StallOn("grad/w1");
  inspector.InspectOnce(absl::Now());
  StallOn("grad/w2");
  inspector.InspectOnce(absl::Now());
  inspector.InspectOnce(absl::Now());
  EXPECT_EQ(StallsLine(), "kolo_stalls_total 2");

  // grad/w1 completes; its stall ends and is not counted again.
  job_->Submit(MakeRequest(2, "grad/w1", absl::Now()));
  inspector.InspectOnce(absl::Now());
  EXPECT_EQ(StallsLine(), "kolo_stalls_total 2");
  EXPECT_EQ(sessions_[2]->TakeCompletions().size(), 1u);
}

TEST_F(StallInspectorTest, TimeoutAbortsTheJobWithDeadlineExceeded) {
  auto started = StallInspector::Start(registry_.get(), &metrics_,
                                       StallPolicy{absl::Seconds(60), absl::Hours(2)});
  ASSERT_TRUE(started.ok()) << started.status();
  StallInspector& inspector = **started;
  StallOn("grad/w1");
  inspector.InspectOnce(absl::Now());
  EXPECT_FALSE(job_->Snapshot().aborted) << "past the warning, short of the timeout";

  inspector.InspectOnce(absl::Now() + absl::Hours(1) + absl::Minutes(1));
  JobSnapshot snap = job_->Snapshot(/*with_history=*/true);
  ASSERT_TRUE(snap.aborted);
  EXPECT_TRUE(absl::StrContains(snap.error, "aborted by the stall timeout (7200 s)")) << snap.error;
  EXPECT_TRUE(absl::StrContains(snap.error, "waiting")) << "names the stall: " << snap.error;
  ASSERT_FALSE(snap.errors.empty());
  EXPECT_TRUE(absl::StartsWith(snap.errors.back(), "DEADLINE_EXCEEDED: job job-1"))
      << snap.errors.back();
  EXPECT_EQ(StallsLine(), "kolo_stalls_total 1");

  // The ranks that were waiting hear DEADLINE_EXCEEDED.
  for (int r = 0; r < 2; ++r) {
    auto done = sessions_[r]->TakeCompletions();
    ASSERT_EQ(done.size(), 1u) << "rank " << r;
    EXPECT_EQ(done[0].code, absl::StatusCode::kDeadlineExceeded);
  }
  // Nothing is pending any more, so further inspections find nothing.
  inspector.InspectOnce(absl::Now() + absl::Hours(10));
  EXPECT_EQ(StallsLine(), "kolo_stalls_total 1");
}

// A timeout shorter than the warning (--stall_timeout_s=3 with the default
// warning of 60 s) aborts at the timeout, not once the warning is reached.
TEST_F(StallInspectorTest, TimeoutShorterThanTheWarningAbortsAtTheTimeout) {
  auto started = StallInspector::Start(registry_.get(), &metrics_,
                                       StallPolicy{absl::Hours(3), absl::Minutes(30)});
  ASSERT_TRUE(started.ok()) << started.status();
  StallInspector& inspector = **started;
  StallOn("grad/w1");
  inspector.InspectOnce(absl::Now());
  JobSnapshot snap = job_->Snapshot();
  ASSERT_TRUE(snap.aborted) << "an hour of waiting is past the 30-minute timeout";
  EXPECT_TRUE(absl::StrContains(snap.error, "aborted by the stall timeout (1800 s)")) << snap.error;
  EXPECT_EQ(StallsLine(), "kolo_stalls_total 1");
}

}  // namespace
}  // namespace kolo::daemon
