#include "daemon/wire/bounded_queue.h"

#include <string>

#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

TEST(BoundedQueueTest, RefusesPastItsBoundInBytes) {
  BoundedQueue<std::string> q(/*max_items=*/100, /*max_bytes=*/1000);
  EXPECT_TRUE(q.Push("a", 600));
  EXPECT_TRUE(q.Push("b", 400));
  EXPECT_EQ(q.bytes(), 1000u);
  EXPECT_FALSE(q.Push("c", 1));  // one byte over
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.Pop(), "a");
  EXPECT_EQ(q.bytes(), 400u);
  EXPECT_TRUE(q.Push("c", 600));
  EXPECT_FALSE(q.Push("d", 1));
}

TEST(BoundedQueueTest, RefusesPastItsBoundInItems) {
  BoundedQueue<int> q(/*max_items=*/3, /*max_bytes=*/1 << 20);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(q.Push(i, 1));
  EXPECT_FALSE(q.Push(3, 1));
  EXPECT_EQ(q.Pop(), 0);
  EXPECT_TRUE(q.Push(3, 1));
  EXPECT_EQ(q.Pop(), 1);
  EXPECT_EQ(q.Pop(), 2);
  EXPECT_EQ(q.Pop(), 3);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.bytes(), 0u);
}

TEST(BoundedQueueTest, AnEmptyQueueTakesOneItemOfAnySize) {
  BoundedQueue<int> q(/*max_items=*/10, /*max_bytes=*/100);
  EXPECT_TRUE(q.Push(1, 5000));  // the largest message always fits
  EXPECT_FALSE(q.Push(2, 1));    // but nothing after it until it is written
  EXPECT_EQ(q.Pop(), 1);
  EXPECT_TRUE(q.Push(2, 1));
}

}  // namespace
}  // namespace kolo::daemon
