// Integration tests: a real kolod and 2 to 8 rank processes per job.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace kolo::testing {
namespace {

class CollectivesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    auto d = DaemonProcess::Start(dir_ + "/kolod.sock");
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_.emplace(std::move(*d));
  }

  void ExpectAllPass(const std::vector<RankResult>& results) {
    for (size_t r = 0; r < results.size(); ++r) {
      EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ":\n" << results[r].output;
    }
  }

  void RunScenario(const std::string& scenario, int n,
                   absl::Duration timeout = absl::Seconds(120)) {
    auto ranks =
        Ranks::Start(daemon_->socket_path(), "job-" + scenario, n, {kTestRankPath, scenario});
    ASSERT_TRUE(ranks.ok()) << ranks.status();
    ExpectAllPass(ranks->Wait(timeout));
    EXPECT_TRUE(daemon_->Alive()) << daemon_->Log();
  }

  std::string dir_;
  std::optional<DaemonProcess> daemon_;
};

TEST_F(CollectivesTest, EveryDtypeAndOpOnTwoRanks) { RunScenario("matrix", 2); }
TEST_F(CollectivesTest, EveryDtypeAndOpOnThreeRanks) { RunScenario("matrix", 3); }
TEST_F(CollectivesTest, SizesUpTo64MiB) { RunScenario("sizes", 2); }
TEST_F(CollectivesTest, AThousandTensorsInFlightInDifferentOrders) { RunScenario("inflight", 4); }
TEST_F(CollectivesTest, LargeTensorsInPartsInDifferentOrders) { RunScenario("parts_any_order", 3); }
TEST_F(CollectivesTest, UnderwayOnceEveryRankSubmitted) { RunScenario("underway", 3); }
TEST_F(CollectivesTest, BroadcastFromEveryRoot) { RunScenario("broadcast", 3); }
TEST_F(CollectivesTest, EightRanks) { RunScenario("matrix", 8, absl::Seconds(240)); }
TEST_F(CollectivesTest, MismatchesFailEveryRankWithNames) { RunScenario("mismatch", 2); }
TEST_F(CollectivesTest, DuplicateNameInFlight) { RunScenario("duplicate", 3); }

TEST_F(CollectivesTest, WholeSurfaceOnTwoRanks) { RunScenario("surface", 2); }
TEST_F(CollectivesTest, WholeSurfaceOnThreeRanks) { RunScenario("surface", 3); }
TEST_F(CollectivesTest, WholeSurfaceOnFiveRanks) { RunScenario("surface", 5); }
TEST_F(CollectivesTest, JoinWithUnevenBatches) { RunScenario("join", 3); }
TEST_F(CollectivesTest, JoinWithUnevenBatchesFourRanks) { RunScenario("join", 4); }

TEST_F(CollectivesTest, CApiOnThreeRanks) {
  auto ranks = Ranks::Start(daemon_->socket_path(), "job-c", 3, {"tests/integration/c_api_rank"});
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  ExpectAllPass(ranks->Wait(absl::Seconds(60)));
}

TEST_F(CollectivesTest, TwoJobsOnOneDaemonAtOnce) {
  auto a = Ranks::Start(daemon_->socket_path(), "job-a", 2, {kTestRankPath, "matrix"});
  auto b = Ranks::Start(daemon_->socket_path(), "job-b", 3, {kTestRankPath, "inflight"},
                        "0ther-token-0ther-token-0ther-tok");
  ASSERT_TRUE(a.ok() && b.ok());
  ExpectAllPass(a->Wait(absl::Seconds(180)));
  ExpectAllPass(b->Wait(absl::Seconds(180)));
}

TEST_F(CollectivesTest, RankDeathAbortsTheJobButNotTheDaemon) {
  auto ranks = Ranks::Start(daemon_->socket_path(), "job-dies", 3, {kTestRankPath, "rank_dies"});
  ASSERT_TRUE(ranks.ok());
  auto results = ranks->Wait(absl::Seconds(30));
  EXPECT_EQ(results[0].exit_code, 0) << results[0].output;
  EXPECT_EQ(results[1].exit_code, 0) << results[1].output;
  EXPECT_EQ(results[2].exit_code, 3) << results[2].output;
  // The daemon goes on serving new jobs, including one with the same id.
  EXPECT_TRUE(daemon_->Alive()) << daemon_->Log();
  RunScenario("duplicate", 2);
  auto again = Ranks::Start(daemon_->socket_path(), "job-dies", 2, {kTestRankPath, "mismatch"});
  ASSERT_TRUE(again.ok());
  ExpectAllPass(again->Wait(absl::Seconds(60)));
}

TEST_F(CollectivesTest, KilledDaemonMakesEveryCallUnavailable) {
  auto ranks =
      Ranks::Start(daemon_->socket_path(), "job-orphan", 2, {kTestRankPath, "daemon_dies"});
  ASSERT_TRUE(ranks.ok());
  ASSERT_TRUE(ranks->WaitForOutput(0, "waiting", absl::Seconds(20)));
  ASSERT_TRUE(ranks->WaitForOutput(1, "waiting", absl::Seconds(20)));
  absl::Time killed = absl::Now();
  daemon_->Kill(SIGKILL);
  auto results = ranks->Wait(absl::Seconds(10));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));
  ExpectAllPass(results);
}

TEST_F(CollectivesTest, WrongTokenIsRefused) {
  // A job whose ranks stay attached, waiting.
  auto a = Ranks::Start(daemon_->socket_path(), "job-tok", 2, {kTestRankPath, "daemon_dies"},
                        "right-right-right-right-right-ri");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->WaitForOutput(0, "waiting", absl::Seconds(20)));
  ASSERT_TRUE(a->WaitForOutput(1, "waiting", absl::Seconds(20)));
  // A third process claiming rank 0 of the same job with another token.
  auto intruder = Ranks::Start(daemon_->socket_path(), "job-tok", 2, {kTestRankPath, "duplicate"},
                               "wrong-wrong-wrong-wrong-wrong-wr");
  ASSERT_TRUE(intruder.ok());
  auto bad = intruder->Wait(absl::Seconds(30));
  for (const auto& r : bad) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("PERMISSION_DENIED"), std::string::npos) << r.output;
  }
  // The rightful job is untouched: its ranks are still waiting.
  daemon_->Kill(SIGKILL);
  ExpectAllPass(a->Wait(absl::Seconds(10)));
}

}  // namespace
}  // namespace kolo::testing
