#include "common/arena_allocator.h"

#include "gtest/gtest.h"

namespace kolo {
namespace {

TEST(ArenaAllocatorTest, AlignsAndDoesNotOverlap) {
  ArenaAllocator a(4096, 64);
  auto x = a.Allocate(1);
  auto y = a.Allocate(65);
  auto z = a.Allocate(0);
  ASSERT_TRUE(x.ok() && y.ok() && z.ok());
  EXPECT_EQ(*x % 64, 0u);
  EXPECT_EQ(*y % 64, 0u);
  EXPECT_GE(*y, *x + 64);
  EXPECT_GE(*z, *y + 128);
  EXPECT_EQ(a.bytes_in_use(), 64u + 128u + 64u);
}

TEST(ArenaAllocatorTest, ExhaustionAndReuseAfterCoalescing) {
  ArenaAllocator a(1024, 64);
  auto p = a.Allocate(256);
  auto q = a.Allocate(256);
  auto r = a.Allocate(512);
  ASSERT_TRUE(p.ok() && q.ok() && r.ok());
  EXPECT_EQ(a.Allocate(1).status().code(), absl::StatusCode::kResourceExhausted);
  a.Free(*q);
  a.Free(*p);
  // p and q coalesce into one 512-byte hole.
  auto big = a.Allocate(512);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(*big, 0u);
  a.Free(*big);
  a.Free(*r);
  EXPECT_EQ(a.bytes_in_use(), 0u);
  EXPECT_TRUE(a.Allocate(1024).ok());
}

TEST(ArenaAllocatorTest, TooLargeNamesTheSize) {
  ArenaAllocator a(1024, 64);
  auto s = a.Allocate(4096);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.status().message().find("4096"), std::string::npos);
}

TEST(ArenaAllocatorTest, DoubleFreeIsIgnored) {
  ArenaAllocator a(1024, 64);
  auto p = a.Allocate(64);
  ASSERT_TRUE(p.ok());
  a.Free(*p);
  a.Free(*p);
  EXPECT_EQ(a.bytes_in_use(), 0u);
}

}  // namespace
}  // namespace kolo
