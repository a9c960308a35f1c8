// A one-node job's join and process-set lifecycle through the negotiator and
// executor: a join counts only once every rank of the job attached, a set
// being removed takes no new names and cannot be removed twice, and a group
// held for a removed set fails instead of waiting forever.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/backend/fake_backend.h"
#include "daemon/backend/fake_device_backend.h"
#include "daemon/job/default_negotiators.h"
#include "daemon/job/job.h"
#include "daemon/session/loopback_session.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

constexpr int kSize = 3;

class JobLifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < kSize; ++r) {
      auto s = LoopbackSession::Create("job-life", r);
      ASSERT_TRUE(s.ok()) << s.status();
      sessions_.push_back(std::move(*s));
    }
    job_ = std::make_unique<Job>("job-life", "token", kSize, &host_, uint64_t{64} << 20,
                                 DefaultNegotiators());
  }

  void AttachAll() {
    for (int r = 0; r < kSize; ++r) Attach(r);
  }
  void Attach(int r) {
    ASSERT_TRUE(job_->AttachRank(r, "session-" + std::to_string(r), 100 + r).ok());
    job_->MaybeStart();  // as the node service does after each attach
  }

  Request Make(int rank, const std::string& name, CollectiveKind kind, int process_set = 0) {
    Request r = FakeRequest(next_id_++, rank, name, -1, sessions_[rank]->session(), kind);
    r.process_set = process_set;
    if (kind != CollectiveKind::kAllreduce) {
      r.shape = {};
      r.bytes = 0;
    }
    return r;
  }

  // Adds a process set of `ranks` through every rank; returns its id.
  int AddSet(std::vector<int64_t> ranks) {
    for (int r = 0; r < kSize; ++r) {
      Request q = Make(r, "add", CollectiveKind::kAddProcessSet);
      q.aux = ranks;
      job_->Submit(std::move(q));
    }
    int id = -1;
    for (int r = 0; r < kSize; ++r) {
      std::vector<ReceivedCompletion> got = sessions_[r]->TakeCompletions();
      EXPECT_EQ(got.size(), 1u);
      if (got.empty()) continue;
      EXPECT_EQ(got[0].code, absl::StatusCode::kOk) << got[0].message;
      id = static_cast<int>(got[0].value);
    }
    return id;
  }

  FakeBackend host_;
  std::vector<std::unique_ptr<LoopbackSession>> sessions_;
  std::unique_ptr<Job> job_;
  uint64_t next_id_ = 1;
};

TEST_F(JobLifecycleTest, AJoinWaitsForRanksThatHaveNotAttachedYet) {
  Attach(0);
  Attach(1);
  job_->Submit(Make(0, "join", CollectiveKind::kJoin));
  job_->Submit(Make(1, "join", CollectiveKind::kJoin));
  // Rank 2 has not attached: the join cannot have completed.
  EXPECT_TRUE(sessions_[0]->TakeCompletions().empty());
  EXPECT_TRUE(sessions_[1]->TakeCompletions().empty());
  Attach(2);
  EXPECT_TRUE(sessions_[0]->TakeCompletions().empty());
  job_->Submit(Make(2, "join", CollectiveKind::kJoin));
  for (int r = 0; r < kSize; ++r) {
    std::vector<ReceivedCompletion> got = sessions_[r]->TakeCompletions();
    ASSERT_EQ(got.size(), 1u) << "rank " << r;
    EXPECT_EQ(got[0].code, absl::StatusCode::kOk) << got[0].message;
    EXPECT_EQ(got[0].value, 2) << "the last rank to join";
  }
}

TEST_F(JobLifecycleTest, ASetBeingRemovedTakesNoNamesAndCannotBeRemovedTwice) {
  AttachAll();
  const int set = AddSet({0, 1});
  ASSERT_GT(set, 0);
  // Hold the executor in an allreduce, so the removal is agreed but waits
  // for its turn in the plan.
  host_.BlockNextExecution();
  std::thread busy([&] {
    for (int r = 0; r < kSize; ++r) job_->Submit(Make(r, "busy", CollectiveKind::kAllreduce));
  });
  ASSERT_TRUE(host_.EnteredWithin(absl::Seconds(10)));
  for (int r = 0; r < kSize; ++r) {
    Request q = Make(r, "remove", CollectiveKind::kRemoveProcessSet);
    q.aux = {set};
    job_->Submit(std::move(q));
  }
  // A name of the set, and a second removal: refused at once.
  job_->Submit(Make(0, "late", CollectiveKind::kAllreduce, set));
  std::vector<ReceivedCompletion> refused = sessions_[0]->TakeCompletions();
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].code, absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused[0].message.find("being removed"), std::string::npos) << refused[0].message;
  host_.Release();
  busy.join();
  for (int r = 0; r < kSize; ++r) {
    std::vector<ReceivedCompletion> got = sessions_[r]->TakeCompletions();
    ASSERT_EQ(got.size(), 2u) << "rank " << r << ": busy and remove";
    for (const ReceivedCompletion& c : got) EXPECT_EQ(c.code, absl::StatusCode::kOk) << c.message;
  }
  for (int r = 0; r < kSize; ++r) {
    Request q = Make(r, "remove/again", CollectiveKind::kRemoveProcessSet);
    q.aux = {set};
    job_->Submit(std::move(q));
  }
  for (int r = 0; r < kSize; ++r) {
    std::vector<ReceivedCompletion> got = sessions_[r]->TakeCompletions();
    ASSERT_EQ(got.size(), 1u) << "rank " << r;
    EXPECT_EQ(got[0].code, absl::StatusCode::kFailedPrecondition) << got[0].message;
  }
}

TEST_F(JobLifecycleTest, AGroupHeldForARemovedSetFails) {
  AttachAll();
  const int set = AddSet({0, 1});
  ASSERT_GT(set, 0);
  // One member of a two-tensor group of the set is ready; the other never
  // comes, and the set is removed.
  for (int r : {0, 1}) {
    Request q = Make(r, "g/a", CollectiveKind::kAllreduce, set);
    q.group_id = 3;
    q.group_size = 2;
    job_->Submit(std::move(q));
  }
  for (int r = 0; r < kSize; ++r) {
    Request q = Make(r, "remove", CollectiveKind::kRemoveProcessSet);
    q.aux = {set};
    job_->Submit(std::move(q));
  }
  for (int r : {0, 1}) {
    std::vector<ReceivedCompletion> got = sessions_[r]->TakeCompletions();
    ASSERT_EQ(got.size(), 2u) << "rank " << r << ": the held member and the removal";
    int gone = 0;
    for (const ReceivedCompletion& c : got) {
      if (c.code == absl::StatusCode::kFailedPrecondition) {
        ++gone;
        EXPECT_NE(c.message.find("was removed"), std::string::npos) << c.message;
      }
    }
    EXPECT_EQ(gone, 1) << "rank " << r;
  }
}

}  // namespace
}  // namespace kolo::daemon
