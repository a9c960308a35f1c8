#include "daemon/job/ingress_group.h"

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

// Whether thread `tid` of this process is asleep in the kernel (state S in
// its /proc stat line): how a test sees that another thread is blocked in
// a futex or a mutex, rather than sleeping and hoping it got there.
bool Asleep(pid_t tid) {
  std::ifstream in(absl::StrCat("/proc/self/task/", tid, "/stat"));
  std::stringstream line;
  line << in.rdbuf();
  const std::string stat = line.str();
  const size_t paren = stat.rfind(')');  // the name may hold spaces
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'S';
}

class CountingMember final : public IngressMember {
 public:
  int Poll() override {
    polls.fetch_add(1);
    if (entered != nullptr && !entered->HasBeenNotified()) entered->Notify();
    if (release != nullptr) release->WaitForNotification();
    return slots;
  }
  bool HasPending() const override { return slots > 0; }
  std::atomic<int> polls{0};
  int slots = 0;
  absl::Notification* entered = nullptr;
  absl::Notification* release = nullptr;
};

TEST(IngressGroupTest, OnlyMembersWithSomethingPendingArePolled) {
  IngressGroup group;
  CountingMember idle, busy;
  busy.slots = 1;
  group.Add(&idle);
  group.Add(&busy);
  EXPECT_EQ(group.PollAll(/*looks=*/8), 1);
  EXPECT_EQ(idle.polls.load(), 0);
  EXPECT_EQ(busy.polls.load(), 1);
  busy.slots = 0;
  EXPECT_EQ(group.PollAll(/*looks=*/8), 0);
  EXPECT_EQ(busy.polls.load(), 1);
}

TEST(IngressGroupTest, OneLeaderAtATime) {
  IngressGroup group;
  EXPECT_FALSE(group.led());
  ASSERT_TRUE(group.TryLead());
  EXPECT_TRUE(group.led());
  EXPECT_FALSE(group.TryLead());
  group.Resign();
  EXPECT_FALSE(group.led());
  EXPECT_TRUE(group.TryLead());
  group.Resign();
}

TEST(IngressGroupTest, PollAllReadsEveryMemberUntilItIsRemoved) {
  IngressGroup group;
  CountingMember a, b;
  a.slots = 2;
  b.slots = 3;
  group.Add(&a);
  group.Add(&b);
  EXPECT_EQ(group.PollAll(), 5);
  group.Remove(&a);
  EXPECT_EQ(group.PollAll(), 3);
  EXPECT_EQ(a.polls.load(), 1);
  EXPECT_EQ(b.polls.load(), 2);
  group.Remove(&b);
  EXPECT_EQ(group.PollAll(), 0);
}

// A session being closed must not be polled after Remove returns: Remove
// waits for a poll of it that is in progress on the leader's thread.
TEST(IngressGroupTest, RemoveWaitsForAPollInProgress) {
  IngressGroup group;
  CountingMember m;
  m.slots = 1;
  absl::Notification entered, release;
  m.entered = &entered;
  m.release = &release;
  group.Add(&m);
  std::thread leader([&] { group.PollAll(); });
  entered.WaitForNotification();
  std::atomic<bool> removed{false};
  std::atomic<pid_t> closer_tid{0};
  std::thread closer([&] {
    closer_tid.store(gettid());
    group.Remove(&m);
    removed.store(true);
  });
  // The closer blocks in Remove (asleep on the group's lock) while the poll
  // goes on; had Remove returned, it would have ended and never slept.
  EXPECT_TRUE(WaitUntil(
      [&] { return removed.load() || (closer_tid.load() != 0 && Asleep(closer_tid.load())); },
      absl::Seconds(20)));
  EXPECT_FALSE(removed.load()) << "Remove returned while the member was being polled";
  release.Notify();
  closer.join();
  leader.join();
  EXPECT_TRUE(removed.load());
  const int polls = m.polls.load();
  EXPECT_EQ(group.PollAll(/*looks=*/4), 0);
  EXPECT_EQ(m.polls.load(), polls);
}

TEST(IngressGroupTest, FollowersWakeWhenTheLeaderResignsOrTheGroupIsWoken) {
  IngressGroup group;
  ASSERT_TRUE(group.TryLead());
  for (int round = 0; round < 2; ++round) {
    std::atomic<bool> back{false};
    std::atomic<pid_t> follower_tid{0};
    std::thread follower([&] {
      follower_tid.store(gettid());
      group.WaitWhileLed(absl::Seconds(30));
      back.store(true);
    });
    // The follower is asleep in WaitWhileLed before the group is woken.
    EXPECT_TRUE(WaitUntil(
        [&] { return follower_tid.load() != 0 && Asleep(follower_tid.load()); },
        absl::Seconds(20)));
    EXPECT_FALSE(back.load());
    const absl::Time start = absl::Now();
    if (round == 0) {
      group.Wake();  // a session closing
    } else {
      group.Resign();
    }
    follower.join();
    EXPECT_TRUE(back.load());
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  }
  // Without a leader there is nothing to wait for.
  const absl::Time start = absl::Now();
  group.WaitWhileLed(absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace kolo::daemon
