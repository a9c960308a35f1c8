// WaitUntil returns as soon as its condition holds and says whether it did;
// StaysFalse reports the first time its condition turns true.
#include "common/testing/wait_until.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kolo {
namespace {

TEST(WaitUntilTest, ATrueConditionReturnsAtOnce) {
  int calls = 0;
  EXPECT_TRUE(WaitUntil(
      [&] {
        ++calls;
        return true;
      },
      absl::Seconds(20)));
  EXPECT_EQ(calls, 1);
}

TEST(WaitUntilTest, ReturnsWhenAnotherThreadMakesItTrue) {
  std::atomic<bool> done{false};
  absl::Notification polled;
  std::thread setter([&] {
    polled.WaitForNotification();
    done.store(true);
  });
  EXPECT_TRUE(WaitUntil(
      [&] {
        if (!polled.HasBeenNotified()) polled.Notify();
        return done.load();
      },
      absl::Seconds(20)));
  setter.join();
}

TEST(WaitUntilTest, AConditionThatNeverHoldsTimesOut) {
  const absl::Time start = absl::Now();
  EXPECT_FALSE(WaitUntil([] { return false; }, absl::Milliseconds(20)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
}

TEST(WaitUntilTest, TheConditionIsCheckedOnceMoreAtTheDeadline) {
  // The first call is false; by the time the deadline has passed the
  // condition holds, and the last look sees it.
  int calls = 0;
  EXPECT_TRUE(WaitUntil([&] { return ++calls > 1; }, absl::ZeroDuration()));
  EXPECT_EQ(calls, 2);
}

TEST(StaysFalseTest, AConditionThatStaysFalsePasses) {
  const absl::Time start = absl::Now();
  EXPECT_TRUE(StaysFalse([] { return false; }, absl::Milliseconds(20)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
}

TEST(StaysFalseTest, ReturnsAsSoonAsItTurnsTrue) {
  int calls = 0;
  EXPECT_FALSE(StaysFalse([&] { return ++calls == 3; }, absl::Seconds(20)));
  EXPECT_EQ(calls, 3);
}

}  // namespace
}  // namespace kolo
