// An elastic job's membership on one node: how epochs form, end and re-form
// (ElasticGroup), with real Jobs over a fake backend.
#include "daemon/job/elastic_group.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/link_lost.h"
#include "common/membership.h"
#include "common/testing/wait_until.h"
#include "daemon/backend/fake_backend.h"
#include "daemon/job/elastic_test_jobs.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

class ElasticGroupTest : public ::testing::Test {
 protected:
  std::unique_ptr<ElasticGroup> MakeGroup(absl::Duration grace = absl::Seconds(10)) {
    return std::make_unique<ElasticGroup>("elastic", "token", TestEpochJobs(&host_), grace);
  }

  static ElasticJoin Initial(int hint, int size, int min_size = 1, int max_size = 0) {
    ElasticJoin j;
    j.session_id = "s-initial-" + std::to_string(hint);
    j.pid = 100 + hint;
    j.hint_rank = hint;
    j.size = size;
    j.min_size = min_size;
    j.max_size = max_size;
    return j;
  }
  static ElasticJoin Survivor(const ElasticSeat& seat) {
    ElasticJoin j = Initial(seat.rank, seat.size);
    j.session_id = "s-e" + std::to_string(seat.epoch + 1) + "-" + std::to_string(seat.rank);
    j.previous_rank = seat.rank;
    j.previous_epoch = seat.epoch;
    return j;
  }
  static ElasticJoin Joiner(int n) {
    ElasticJoin j = Initial(0, 1);
    j.session_id = "s-joiner-" + std::to_string(n);
    j.joiner = true;
    return j;
  }

  // Joins every one of `joins` at once (each on its own thread, as attaches
  // are) and returns their seats in the same order.
  std::vector<absl::StatusOr<ElasticSeat>> JoinAll(ElasticGroup& group,
                                                   const std::vector<ElasticJoin>& joins,
                                                   absl::Duration timeout = absl::Seconds(10)) {
    std::vector<absl::StatusOr<ElasticSeat>> seats(joins.size(), absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    const absl::Time deadline = absl::Now() + timeout;
    for (size_t i = 0; i < joins.size(); ++i) {
      threads.emplace_back(
          [&, i] { seats[i] = group.Join(joins[i], deadline, [] { return false; }); });
    }
    for (std::thread& t : threads) t.join();
    return seats;
  }

  FakeBackend host_;
};

TEST_F(ElasticGroupTest, TheFirstEpochFormsWithTheInitialSizeInTheAskedOrder) {
  auto group = MakeGroup();
  auto seats = JoinAll(*group, {Initial(2, 3), Initial(0, 3), Initial(1, 3)});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(seats[i].ok()) << seats[i].status();
  EXPECT_EQ(seats[0]->rank, 2);
  EXPECT_EQ(seats[1]->rank, 0);
  EXPECT_EQ(seats[2]->rank, 1);
  EXPECT_EQ(seats[0]->size, 3);
  EXPECT_EQ(seats[0]->epoch, 1u);
  EXPECT_EQ(seats[0]->job, seats[1]->job);
  EXPECT_EQ(seats[0]->job->elastic_epoch(), 1u);
  ASSERT_EQ(group->History().size(), 1u);
  EXPECT_EQ(group->History()[0].reason, "started");
}

TEST_F(ElasticGroupTest, ADeathEndsTheEpochAndTheSurvivorsReformDensely) {
  auto group = MakeGroup();
  auto seats = JoinAll(*group, {Initial(0, 3), Initial(1, 3), Initial(2, 3)});
  std::shared_ptr<Job> first = seats[0]->job;
  // Rank 1's session ends without a detach: its job fails the others'
  // collectives, and the membership learns it.
  first->RankLeft(1, /*clean=*/false, absl::UnavailableError("pid 101 exited"));
  group->Left(1, 1, /*clean=*/false, /*rejoin=*/false, absl::UnavailableError("pid 101 exited"));
  EXPECT_TRUE(IsMembershipChanged(first->AbortStatus())) << first->AbortStatus();
  EXPECT_NE(first->AbortStatus().message().find("rank 1 died"), absl::string_view::npos);

  auto next = JoinAll(*group, {Survivor(*seats[2]), Survivor(*seats[0])});
  ASSERT_TRUE(next[0].ok()) << next[0].status();
  ASSERT_TRUE(next[1].ok()) << next[1].status();
  EXPECT_EQ(next[1]->rank, 0) << "old rank 0 stays rank 0";
  EXPECT_EQ(next[0]->rank, 1) << "old rank 2 becomes rank 1";
  EXPECT_EQ(next[0]->size, 2);
  EXPECT_EQ(next[0]->epoch, 2u);
  EXPECT_NE(next[0]->job, first);
  std::vector<EpochRecord> history = group->History();
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[1].left, 1);
  EXPECT_TRUE(history[1].joined.empty());
  EXPECT_NE(history[1].reason.find("rank 1 died: pid 101 exited"), std::string::npos);
}

TEST_F(ElasticGroupTest, AJoinerOfAJobWhoseRanksAllFinishedIsRefused) {
  auto group = MakeGroup();
  auto seats = JoinAll(*group, {Initial(0, 2), Initial(1, 2)});
  std::shared_ptr<Job> first = seats[0]->job;
  seats.clear();
  std::vector<std::shared_ptr<Job>> released;
  for (int r = 0; r < 2; ++r) {
    first->RankLeft(r, /*clean=*/true, absl::OkStatus());
    released.push_back(group->Left(1, r, /*clean=*/true, /*rejoin=*/false, absl::OkStatus()));
  }
  EXPECT_TRUE(group->Finished()) << "its ranks all left: a joiner now is refused at once";
  // The ended epoch's Job is handed back once its last rank here left, and
  // the group holds it no more (its threads and sockets go with it).
  EXPECT_EQ(released[0], nullptr) << "rank 1 is still attached";
  EXPECT_EQ(released[1], first);
  released.clear();
  EXPECT_EQ(first.use_count(), 1) << "only this test holds the ended epoch";
  auto late = JoinAll(*group, {Joiner(1)}, absl::Seconds(5));
  ASSERT_FALSE(late[0].ok());
  EXPECT_EQ(late[0].status().code(), absl::StatusCode::kFailedPrecondition) << late[0].status();
  EXPECT_NE(late[0].status().message().find("no rank left"), absl::string_view::npos);
  EXPECT_TRUE(group->Finished());
}

TEST_F(ElasticGroupTest, OnlyWhatThePeersEndIsAMembershipChange) {
  auto group = MakeGroup();
  auto seats = JoinAll(*group, {Initial(0, 2), Initial(1, 2)});
  std::shared_ptr<Job> job = seats[0]->job;
  job->AbortFromPeers(absl::AbortedError("node b left the job"));
  EXPECT_TRUE(IsMembershipChanged(job->AbortStatus())) << job->AbortStatus();

  auto other = MakeGroup();
  auto more = JoinAll(*other, {Initial(0, 2), Initial(1, 2)});
  more[0]->job->Abort(absl::AbortedError("aborted by the operator"));
  EXPECT_FALSE(IsMembershipChanged(more[0]->job->AbortStatus()))
      << "an operator's abort ends the job, it is not a reset";
}

TEST_F(ElasticGroupTest, ABrokenLinkToANodeIsAMembershipChangeOfAnElasticJob) {
  auto group = MakeGroup();
  auto seats = JoinAll(*group, {Initial(0, 2), Initial(1, 2)});
  std::shared_ptr<Job> job = seats[0]->job;
  // The data plane may see a lost node before the Peer plane reports it.
  const absl::Status lost = absl::AbortedError(
      absl::StrCat("UNAVAILABLE: ", LinkLostMessage(0, 1), ": Endpoint timeout (UCX -80)"));
  const absl::Status failed_with = job->LinkLost(lost);
  EXPECT_TRUE(IsMembershipChanged(failed_with)) << failed_with;
  EXPECT_NE(failed_with.message().find("connection to node 1 failed"), std::string::npos);
  EXPECT_EQ(job->AbortStatus(), failed_with);
}

TEST_F(ElasticGroupTest, AJoinerWaitsUntilTheRanksResetThenComesLast) {
  auto group = MakeGroup();
  auto seats = JoinAll(*group, {Initial(0, 2), Initial(1, 2)});
  absl::StatusOr<ElasticSeat> joined = absl::UnknownError("not run");
  std::thread joiner([&] {
    joined = group->Join(Joiner(1), absl::Now() + absl::Seconds(10), [] { return false; });
  });
  WaitUntil([&] { return group->View().joiners_waiting != 0; }, absl::Seconds(10));
  EXPECT_EQ(group->View().joiners_waiting, 1);
  EXPECT_TRUE(seats[0]->job->AbortStatus().ok()) << "a joiner alone ends no epoch";

  // Both ranks saw the joiner at a commit and reset: detach to rejoin, then
  // attach again.
  for (int r = 0; r < 2; ++r) {
    seats[r]->job->RankLeft(r, /*clean=*/true, absl::OkStatus());
    group->Left(1, r, /*clean=*/true, /*rejoin=*/true, absl::OkStatus());
  }
  auto next = JoinAll(*group, {Survivor(*seats[0]), Survivor(*seats[1])});
  joiner.join();
  ASSERT_TRUE(joined.ok()) << joined.status();
  ASSERT_TRUE(next[0].ok() && next[1].ok());
  EXPECT_EQ(next[0]->rank, 0);
  EXPECT_EQ(next[1]->rank, 1);
  EXPECT_EQ(joined->rank, 2);
  EXPECT_EQ(joined->size, 3);
  EXPECT_EQ(group->History().back().joined, std::vector<int>{2});
  EXPECT_EQ(group->View().joiners_waiting, 0);
}

TEST_F(ElasticGroupTest, AResetOfOneRankEndsTheEpochForTheOthers) {
  auto group = MakeGroup();
  auto seats = JoinAll(*group, {Initial(0, 2), Initial(1, 2)});
  std::thread reset([&] {
    (void)group->Join(Survivor(*seats[1]), absl::Now() + absl::Seconds(5), [] { return false; });
  });
  WaitUntil([&] { return !seats[0]->job->AbortStatus().ok(); }, absl::Seconds(10));
  EXPECT_TRUE(IsMembershipChanged(seats[0]->job->AbortStatus()));
  auto next = JoinAll(*group, {Survivor(*seats[0])});
  reset.join();
  ASSERT_TRUE(next[0].ok()) << next[0].status();
  EXPECT_EQ(next[0]->size, 2);
}

TEST_F(ElasticGroupTest, ARankThatDoesNotComeBackIsDroppedAfterTheGrace) {
  auto group = MakeGroup(absl::Milliseconds(200));
  auto seats = JoinAll(*group, {Initial(0, 2), Initial(1, 2)});
  group->Left(1, 1, /*clean=*/true, /*rejoin=*/true, absl::OkStatus());
  const absl::Time start = absl::Now();
  auto next = JoinAll(*group, {Survivor(*seats[0])});
  ASSERT_TRUE(next[0].ok()) << next[0].status();
  EXPECT_EQ(next[0]->size, 1);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(150));
}

TEST_F(ElasticGroupTest, FewerThanTheMinimumWaitUntilTheirDeadline) {
  auto group = MakeGroup();
  auto seats = JoinAll(*group, {Initial(0, 2, /*min_size=*/2), Initial(1, 2, 2)});
  group->Left(1, 1, /*clean=*/false, /*rejoin=*/false, absl::UnavailableError("gone"));
  auto next = JoinAll(*group, {Survivor(*seats[0])}, absl::Milliseconds(300));
  ASSERT_FALSE(next[0].ok());
  EXPECT_EQ(next[0].status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(next[0].status().message().find("at least 2"), absl::string_view::npos)
      << next[0].status();
}

TEST_F(ElasticGroupTest, JoinersBeyondTheMaximumAreNotCountedAsWaiting) {
  auto group = MakeGroup();
  auto seats = JoinAll(*group, {Initial(0, 2, 1, /*max_size=*/2), Initial(1, 2, 1, 2)});
  std::atomic<bool> stop{false};
  std::atomic<int> looked{0};  // Join asks whether it was cancelled once it waits
  absl::StatusOr<ElasticSeat> joined = absl::UnknownError("not run");
  std::thread joiner([&] {
    joined = group->Join(Joiner(1), absl::Now() + absl::Seconds(10), [&] {
      looked.fetch_add(1);
      return stop.load();
    });
  });
  EXPECT_TRUE(WaitUntil([&] { return looked.load() > 0; }, absl::Seconds(10)));
  EXPECT_EQ(group->View().joiners_waiting, 0);
  stop = true;
  joiner.join();
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace kolo::daemon
