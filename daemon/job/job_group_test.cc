// Grouped collectives in a Job: the group is held until every member is
// ready, and a member whose ranks disagree counts toward its group (it fails
// alone) instead of holding the others back forever.
#include <memory>
#include <string>
#include <vector>

#include "daemon/backend/fake_backend.h"
#include "daemon/backend/fake_device_backend.h"
#include "daemon/job/default_negotiators.h"
#include "daemon/job/job.h"
#include "daemon/session/loopback_session.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

class JobGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < 2; ++r) {
      auto s = LoopbackSession::Create("job-group", r);
      ASSERT_TRUE(s.ok()) << s.status();
      sessions_.push_back(std::move(*s));
    }
    job_ = std::make_unique<Job>("job-group", "token", 2, &host_, uint64_t{64} << 20,
                                 DefaultNegotiators());
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(job_->AttachRank(r, "session-" + std::to_string(r), 100 + r).ok());
    }
    job_->MaybeStart();
  }

  Request Member(int rank, const std::string& name) {
    Request r = FakeRequest(next_id_++, rank, name, -1, sessions_[rank]->session());
    r.group_size = 2;
    r.group_id = 7;
    return r;
  }

  FakeBackend host_;
  std::vector<std::unique_ptr<LoopbackSession>> sessions_;
  std::unique_ptr<Job> job_;
  uint64_t next_id_ = 1;
};

TEST_F(JobGroupTest, AFailedMemberDoesNotHoldItsGroupBack) {
  job_->Submit(Member(0, "g/ok"));
  job_->Submit(Member(1, "g/ok"));
  EXPECT_TRUE(host_.executed().empty());  // held: the group is not complete
  Request bad0 = Member(0, "g/bad");
  Request bad1 = Member(1, "g/bad");
  bad1.shape = {5};
  bad1.bytes = 20;
  job_->Submit(std::move(bad0));
  job_->Submit(std::move(bad1));
  for (int r = 0; r < 2; ++r) {
    std::vector<ReceivedCompletion> got = sessions_[r]->TakeCompletions();
    ASSERT_EQ(got.size(), 2u) << "rank " << r;
    int ok = 0, failed = 0;
    for (const ReceivedCompletion& c : got) {
      if (c.code == absl::StatusCode::kOk) ++ok;
      if (c.code == absl::StatusCode::kFailedPrecondition) ++failed;
    }
    EXPECT_EQ(ok, 1) << "rank " << r;
    EXPECT_EQ(failed, 1) << "rank " << r;
  }
}

}  // namespace
}  // namespace kolo::daemon
