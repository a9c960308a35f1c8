#include "daemon/backend/cpu/worker_pool.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

// Runs ParallelFor(n) and expects every index to have run exactly once.
void ExpectEachIndexOnce(WorkerPool& pool, size_t n) {
  std::unique_ptr<std::atomic<int>[]> counts(new std::atomic<int>[n + 1]);
  for (size_t i = 0; i <= n; ++i) counts[i].store(0);
  pool.ParallelFor(n, [&](size_t i) {
    ASSERT_LT(i, n);
    counts[i].fetch_add(1, std::memory_order_relaxed);
  });
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(counts[i].load(), 1) << "index " << i << " of " << n;
  }
  EXPECT_EQ(counts[n].load(), 0);
}

class WorkerPoolTest : public ::testing::TestWithParam<int> {};

TEST_P(WorkerPoolTest, RunsEachIndexExactlyOnce) {
  WorkerPool pool(GetParam());
  EXPECT_EQ(pool.threads(), GetParam());
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{100000}}) {
    ExpectEachIndexOnce(pool, n);
  }
}

TEST_P(WorkerPoolTest, ManyBackToBackCallsEachComplete) {
  WorkerPool pool(GetParam());
  for (int round = 0; round < 500; ++round) {
    ExpectEachIndexOnce(pool, 1 + round % 37);
  }
}

TEST_P(WorkerPoolTest, ConcurrentCallersAllComplete) {
  WorkerPool pool(GetParam());
  constexpr int kCallers = 6;
  constexpr int kRounds = 50;
  constexpr size_t kN = 257;
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < kRounds; ++round) {
        std::vector<std::atomic<int>> counts(kN);
        pool.ParallelFor(kN, [&](size_t i) { counts[i].fetch_add(1); });
        for (auto& c : counts) {
          if (c.load() != 1) wrong.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Threads, WorkerPoolTest, ::testing::Values(0, 1, 3, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "Helpers" + std::to_string(info.param);
                         });

TEST(WorkerPoolConcurrencyTest, HelpersRunItemsAlongsideTheCaller) {
  // Each of the two items waits for the other to start: they can only both
  // finish if a helper runs one while the caller runs the other. The pool is
  // fresh, so this is its first batch, which the helper must not miss even
  // if its thread was not yet waiting when the batch began.
  WorkerPool pool(1);
  absl::Notification started[2];
  std::atomic<int> saw_other{0};
  pool.ParallelFor(2, [&](size_t i) {
    started[i].Notify();
    if (started[1 - i].WaitForNotificationWithTimeout(absl::Seconds(10))) {
      saw_other.fetch_add(1);
    }
  });
  EXPECT_EQ(saw_other.load(), 2) << "items ran one after the other";
}

TEST(WorkerPoolConcurrencyTest, EveryHelperJoinsTheFirstBatch) {
  // Five items that all wait for one another need the caller and all four
  // helpers at once.
  constexpr int kHelpers = 4;
  WorkerPool pool(kHelpers);
  absl::Notification started[kHelpers + 1];
  std::atomic<int> saw_all{0};
  pool.ParallelFor(kHelpers + 1, [&](size_t i) {
    started[i].Notify();
    bool all = true;
    for (auto& n : started) {
      all = all && n.WaitForNotificationWithTimeout(absl::Seconds(10));
    }
    if (all) saw_all.fetch_add(1);
  });
  EXPECT_EQ(saw_all.load(), kHelpers + 1);
}

TEST(WorkerPoolConcurrencyTest, CallerWithNoHelpersRunsEverythingItself) {
  WorkerPool pool(0);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  pool.ParallelFor(100, [&](size_t) {
    if (std::this_thread::get_id() != caller) elsewhere.fetch_add(1);
  });
  EXPECT_EQ(elsewhere.load(), 0);
}

TEST(WorkerPoolLifetimeTest, DestroysCleanlyWithIdleHelpers) {
  for (int threads : {0, 1, 4, 16}) {
    WorkerPool pool(threads);  // never used: every helper is asleep
  }
}

TEST(WorkerPoolLifetimeTest, DestroysCleanlyAfterWork) {
  for (int round = 0; round < 20; ++round) {
    WorkerPool pool(4);
    ExpectEachIndexOnce(pool, 64);
  }
}

}  // namespace
}  // namespace kolo::daemon
