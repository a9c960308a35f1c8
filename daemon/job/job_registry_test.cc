// JobRegistry's incarnations of one job id: a job that ended because a rank
// shut down (or died) while others were still attached starts again on the
// next attach (shutdown() then init()), and the ranks of the ended one never
// reach the new one.
#include "daemon/job/job_registry.h"

#include <memory>
#include <string>

#include "daemon/backend/fake_backend.h"
#include "daemon/job/default_negotiators.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

class JobRegistryTest : public ::testing::Test {
 protected:
  JoinRequest Attach(int rank, const std::string& token = "token") {
    JoinRequest r;
    r.uid = 1000;
    r.job_id = "job-reg";
    r.job_token = token;
    r.rank = rank;
    r.size = 2;
    r.session_id = "session-" + std::to_string(rank) + "-" + std::to_string(next_session_++);
    r.pid = 100 + rank;
    return r;
  }

  FakeBackend host_;
  JobRegistry registry_{&host_, uint64_t{64} << 20, DefaultNegotiators()};
  int next_session_ = 0;
};

TEST_F(JobRegistryTest, AnAttachAfterARankShutDownStartsAFreshIncarnation) {
  auto old0 = registry_.Join(Attach(0));
  auto old1 = registry_.Join(Attach(1));
  ASSERT_TRUE(old0.ok() && old1.ok());
  ASSERT_EQ(*old0, *old1);
  std::shared_ptr<Job> old = *old0;

  registry_.Leave(old, 1000, 0, /*clean=*/true, absl::OkStatus());
  EXPECT_EQ(old->AbortStatus().code(), absl::StatusCode::kAborted);

  // Rank 0 attaches again while rank 1 is still in the ended job.
  auto new0 = registry_.Join(Attach(0));
  ASSERT_TRUE(new0.ok()) << new0.status();
  EXPECT_NE(*new0, old);
  EXPECT_TRUE((*new0)->AbortStatus().ok());
  EXPECT_EQ(registry_.size(), 1);

  // The ended job's rank 1 leaves: the new incarnation stays.
  registry_.Leave(old, 1000, 1, /*clean=*/true, absl::OkStatus());
  EXPECT_EQ(registry_.size(), 1);
  auto new1 = registry_.Join(Attach(1));
  ASSERT_TRUE(new1.ok()) << new1.status();
  EXPECT_EQ(*new1, *new0);
  EXPECT_TRUE((*new0)->AbortStatus().ok());
}

TEST_F(JobRegistryTest, AnEndedJobIsNotStartedAgainWithAnotherToken) {
  auto old0 = registry_.Join(Attach(0));
  auto old1 = registry_.Join(Attach(1));
  ASSERT_TRUE(old0.ok() && old1.ok());
  registry_.Leave(*old0, 1000, 0, /*clean=*/true, absl::OkStatus());
  auto squatter = registry_.Join(Attach(0, "other-token"));
  EXPECT_EQ(squatter.status().code(), absl::StatusCode::kPermissionDenied);
  // The ended job is still the one registered: the right token restarts it.
  auto again = registry_.Join(Attach(0));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(*again, *old0);
}

TEST_F(JobRegistryTest, ADrainingDaemonDoesNotStartAnEndedJobAgain) {
  auto old0 = registry_.Join(Attach(0));
  auto old1 = registry_.Join(Attach(1));
  ASSERT_TRUE(old0.ok() && old1.ok());
  registry_.Leave(*old0, 1000, 0, /*clean=*/false, absl::UnavailableError("killed"));
  registry_.SetDraining(true);
  EXPECT_EQ(registry_.Join(Attach(0)).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(JobRegistryTest, ALiveJobStillRefusesARankThatIsAttached) {
  ASSERT_TRUE(registry_.Join(Attach(0)).ok());
  EXPECT_EQ(registry_.Join(Attach(0)).status().code(), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace kolo::daemon
