#include "client/kolorun/elastic_controller.h"

#include <chrono>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::kolorun {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using Kind = ElasticController::Verdict::Kind;
using Clock = ElasticController::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr ExitStatus kSuccess{.signaled = false, .value = 0};
constexpr ExitStatus kFailure{.signaled = false, .value = 3};

ElasticOptions Options(int min, int max) {
  ElasticOptions o;
  o.enabled = true;
  o.min_ranks = min;
  o.max_ranks = max;
  o.max_failures_per_host = 3;
  o.restart_backoff = absl::Seconds(1);
  o.max_restart_backoff = absl::Seconds(3);
  o.elastic_timeout = absl::Seconds(60);
  return o;
}

// Time is a fixed origin plus offsets: the controller reads no clock.
const Clock::time_point kT0 = Clock::time_point() + std::chrono::hours(1);

TEST(ElasticControllerTest, FailedRankRestartsOnItsHostAfterDoublingBackoff) {
  ElasticController c(Options(1, 2), {{"a", 2}});
  c.OnStarted(0, "a");
  c.OnStarted(1, "a");
  EXPECT_THAT(c.TakeDueStarts(kT0), IsEmpty());

  ElasticController::Verdict v = c.OnExited(1, kFailure, kT0);
  EXPECT_EQ(v.kind, Kind::kRestart);
  EXPECT_EQ(v.host, "a");
  EXPECT_EQ(v.host_failures, 1);
  EXPECT_EQ(v.restart_at, kT0 + seconds(1));
  // The pending restart holds the slot: no joiner for it meanwhile.
  EXPECT_THAT(c.TakeDueStarts(kT0 + milliseconds(999)), IsEmpty());
  EXPECT_FALSE(c.CheckMinimum(kT0).has_value());
  EXPECT_THAT(c.TakeDueStarts(kT0 + seconds(1)), ElementsAre("a"));
  c.OnStarted(2, "a");
  EXPECT_THAT(c.TakeDueStarts(kT0 + seconds(5)), IsEmpty());

  v = c.OnExited(2, kFailure, kT0 + seconds(10));
  EXPECT_EQ(v.kind, Kind::kRestart);
  EXPECT_EQ(v.host_failures, 2);
  EXPECT_EQ(v.restart_at, kT0 + seconds(12));
}

TEST(ElasticControllerTest, BackoffIsCapped) {
  ElasticOptions o = Options(1, 1);
  o.max_failures_per_host = 10;
  ElasticController c(o, {{"a", 1}});
  Clock::time_point now = kT0;
  std::vector<Clock::duration> waits;
  for (int serial = 0; serial < 4; ++serial) {
    c.OnStarted(serial, "a");
    const ElasticController::Verdict v = c.OnExited(serial, kFailure, now);
    ASSERT_EQ(v.kind, Kind::kRestart);
    waits.push_back(v.restart_at - now);
    now = v.restart_at;
    ASSERT_THAT(c.TakeDueStarts(now), ElementsAre("a"));
  }
  EXPECT_THAT(waits, ElementsAre(seconds(1), seconds(2), seconds(3), seconds(3)));
}

TEST(ElasticControllerTest, HostReachingTheLimitIsBlocklisted) {
  ElasticOptions o = Options(2, 3);
  o.max_failures_per_host = 2;
  ElasticController c(o, {{"a", 2}, {"b", 1}});
  c.OnStarted(0, "a");
  c.OnStarted(1, "a");
  c.OnStarted(2, "b");
  EXPECT_EQ(c.OnExited(0, kFailure, kT0).kind, Kind::kRestart);
  const ElasticController::Verdict v = c.OnExited(1, kFailure, kT0);
  EXPECT_EQ(v.kind, Kind::kBlocklisted);
  EXPECT_EQ(v.host_failures, 2);
  EXPECT_TRUE(c.blocklisted("a"));
  // The restart pending there is dropped, and nothing new starts there.
  EXPECT_THAT(c.TakeDueStarts(kT0 + seconds(100)), IsEmpty());
  // One rank left (on b), fewer than 2, and no discovery: the job ends.
  EXPECT_EQ(c.CheckMinimum(kT0 + seconds(100)), 1);
}

TEST(ElasticControllerTest, RanksOnABlocklistedHostGoOnButAreNotRestarted) {
  ElasticOptions o = Options(1, 3);
  o.max_failures_per_host = 1;
  ElasticController c(o, {{"a", 3}});
  c.OnStarted(0, "a");
  c.OnStarted(1, "a");
  c.OnStarted(2, "a");
  EXPECT_EQ(c.OnExited(0, kFailure, kT0).kind, Kind::kBlocklisted);
  EXPECT_FALSE(c.CheckMinimum(kT0).has_value());
  const ElasticController::Verdict v = c.OnExited(1, kFailure, kT0);
  EXPECT_EQ(v.kind, Kind::kNotRestarted);
  EXPECT_EQ(v.host_failures, 2);
  EXPECT_THAT(c.TakeDueStarts(kT0 + seconds(100)), IsEmpty());
}

TEST(ElasticControllerTest, SuccessEndsGrowthAndLaterFailuresEndTheJob) {
  ElasticController c(Options(1, 3), {{"a", 3}});
  c.OnStarted(0, "a");
  c.OnStarted(1, "a");
  c.OnStarted(2, "a");
  EXPECT_EQ(c.OnExited(1, kFailure, kT0).kind, Kind::kRestart);
  ElasticController::Verdict v = c.OnExited(0, kSuccess, kT0);
  EXPECT_EQ(v.kind, Kind::kSucceeded);
  EXPECT_TRUE(v.first_success);
  EXPECT_FALSE(c.growing());
  // The pending restart is dropped.
  EXPECT_THAT(c.TakeDueStarts(kT0 + seconds(100)), IsEmpty());
  EXPECT_EQ(c.OnExited(2, kFailure, kT0).kind, Kind::kEnding);
  EXPECT_FALSE(c.CheckMinimum(kT0 + seconds(100)).has_value());
}

TEST(ElasticControllerTest, AJoinerFailingWhileTheJobFinishesIsNotAJobFailure) {
  ElasticController c(Options(1, 3), {{"a", 3}});
  c.OnStarted(0, "a");
  c.OnStarted(1, "a");
  c.OnStarted(2, "a", /*joiner=*/true);
  EXPECT_EQ(c.OnExited(0, kSuccess, kT0).kind, Kind::kSucceeded);
  EXPECT_EQ(c.OnExited(2, kFailure, kT0).kind, Kind::kLateJoiner);
  EXPECT_EQ(c.OnExited(1, kFailure, kT0).kind, Kind::kEnding) << "an initial rank still counts";
}

TEST(ElasticControllerTest, SecondSuccessIsNotTheFirst) {
  ElasticController c(Options(1, 2), {{"a", 2}});
  c.OnStarted(0, "a");
  c.OnStarted(1, "a");
  EXPECT_TRUE(c.OnExited(0, kSuccess, kT0).first_success);
  EXPECT_FALSE(c.OnExited(1, kSuccess, kT0).first_success);
}

TEST(ElasticControllerTest, StopEndsGrowth) {
  ElasticController c(Options(1, 2), {{"a", 2}});
  c.OnStarted(0, "a");
  c.Stop();
  EXPECT_FALSE(c.growing());
  EXPECT_THAT(c.TakeDueStarts(kT0), IsEmpty());
  EXPECT_EQ(c.OnExited(0, kFailure, kT0).kind, Kind::kEnding);
  EXPECT_EQ(c.OnStartFailed("a", kT0).kind, Kind::kEnding);
}

TEST(ElasticControllerTest, NewSlotsGetJoinersUpToMax) {
  ElasticController c(Options(2, 4), {{"a", 2}});
  c.OnStarted(0, "a");
  c.OnStarted(1, "a");
  EXPECT_THAT(c.TakeDueStarts(kT0), IsEmpty());
  EXPECT_THAT(c.SetHosts({{"a", 3}, {"b", 2}}), IsEmpty());
  const std::vector<std::string> starts = c.TakeDueStarts(kT0);
  EXPECT_THAT(starts, ElementsAre("a", "b"));  // 4 ranks: --max-np.
  c.OnStarted(2, "a");
  c.OnStarted(3, "b");
  EXPECT_THAT(c.TakeDueStarts(kT0), IsEmpty());
}

TEST(ElasticControllerTest, UnboundedMaxFillsEverySlot) {
  ElasticController c(Options(1, 0), {{"a", 1}});
  c.OnStarted(0, "a");
  c.SetHosts({{"a", 2}, {"b", 3}});
  EXPECT_THAT(c.TakeDueStarts(kT0), ElementsAre("a", "b", "b", "b"));
}

TEST(ElasticControllerTest, HostThatLeavesHasItsRanksStoppedNotRestarted) {
  ElasticOptions o = Options(1, 0);
  o.discovery_script = "/find-hosts";
  ElasticController c(o, {{"a", 1}, {"b", 2}});
  c.OnStarted(0, "a");
  c.OnStarted(1, "b");
  c.OnStarted(2, "b");
  EXPECT_EQ(c.OnExited(2, kFailure, kT0).kind, Kind::kRestart);
  EXPECT_THAT(c.SetHosts({{"a", 1}}), UnorderedElementsAre(1));
  const ElasticController::Verdict v =
      c.OnExited(1, ExitStatus{.signaled = true, .value = 15}, kT0);
  EXPECT_EQ(v.kind, Kind::kStopped);
  // The restart pending on b went with it.
  EXPECT_THAT(c.TakeDueStarts(kT0 + seconds(100)), IsEmpty());
  EXPECT_FALSE(c.CheckMinimum(kT0).has_value());
}

TEST(ElasticControllerTest, WithDiscoveryTooFewRanksWaitsForTheTimeout) {
  ElasticOptions o = Options(2, 0);
  o.discovery_script = "/find-hosts";
  ElasticController c(o, {{"a", 1}, {"b", 1}});
  c.OnStarted(0, "a");
  c.OnStarted(1, "b");
  EXPECT_THAT(c.SetHosts({{"a", 1}}), ElementsAre(1));
  EXPECT_EQ(c.OnExited(1, ExitStatus{.signaled = true, .value = 15}, kT0).kind, Kind::kStopped);
  EXPECT_FALSE(c.CheckMinimum(kT0).has_value());
  EXPECT_FALSE(c.CheckMinimum(kT0 + seconds(59)).has_value());
  // A host comes back in time: the wait is over.
  c.SetHosts({{"a", 1}, {"c", 1}});
  EXPECT_THAT(c.TakeDueStarts(kT0 + seconds(59)), ElementsAre("c"));
  c.OnStarted(2, "c");
  EXPECT_FALSE(c.CheckMinimum(kT0 + seconds(59)).has_value());
  // Lost again, and this time for good.
  c.SetHosts({{"a", 1}});
  EXPECT_FALSE(c.CheckMinimum(kT0 + seconds(100)).has_value());
  EXPECT_EQ(c.CheckMinimum(kT0 + seconds(160)), 1);
}

TEST(ElasticControllerTest, StartFailureCountsAgainstTheHost) {
  ElasticOptions o = Options(1, 2);
  o.max_failures_per_host = 2;
  ElasticController c(o, {{"a", 1}, {"b", 1}});
  c.OnStarted(0, "a");
  ASSERT_THAT(c.TakeDueStarts(kT0), ElementsAre("b"));
  EXPECT_EQ(c.OnStartFailed("b", kT0).kind, Kind::kRestart);
  ASSERT_THAT(c.TakeDueStarts(kT0 + seconds(1)), ElementsAre("b"));
  EXPECT_EQ(c.OnStartFailed("b", kT0 + seconds(1)).kind, Kind::kBlocklisted);
  EXPECT_THAT(c.TakeDueStarts(kT0 + seconds(100)), IsEmpty());
}

TEST(ElasticControllerTest, ShrunkHostKeepsItsRanks) {
  ElasticOptions o = Options(1, 0);
  o.discovery_script = "/find-hosts";
  ElasticController c(o, {{"a", 2}});
  c.OnStarted(0, "a");
  c.OnStarted(1, "a");
  EXPECT_THAT(c.SetHosts({{"a", 1}}), IsEmpty());
  EXPECT_THAT(c.TakeDueStarts(kT0), IsEmpty());
  // One leaves: still no new one, the host has its one slot filled.
  EXPECT_EQ(c.OnExited(0, kSuccess, kT0).kind, Kind::kSucceeded);
}

}  // namespace
}  // namespace kolo::kolorun
