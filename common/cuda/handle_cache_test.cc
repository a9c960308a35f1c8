// HandleCache without a GPU: a fake opener counts opens and closes.
#include "common/cuda/handle_cache.h"

#include <memory>

#include "gtest/gtest.h"

namespace kolo::cuda {
namespace {

struct Counters {
  int opened = 0;
  int closed = 0;
};

// Move-only like the real mappings; counts its own close.
class FakeMapping {
 public:
  FakeMapping(Counters* c, uint8_t tag) : counters_(c), tag_(tag) { ++c->opened; }
  FakeMapping(FakeMapping&& o) noexcept
      : counters_(std::exchange(o.counters_, nullptr)), tag_(o.tag_) {}
  FakeMapping(const FakeMapping&) = delete;
  ~FakeMapping() {
    if (counters_ != nullptr) ++counters_->closed;
  }
  uint8_t tag() const { return tag_; }

 private:
  Counters* counters_;
  uint8_t tag_;
};

IpcHandleBytes Handle(uint8_t b) {
  IpcHandleBytes h{};
  h[0] = b;
  h[63] = b;
  return h;
}

TEST(HandleCacheTest, OpensEachHandleOnce) {
  Counters c;
  HandleCache<FakeMapping> cache(
      [&](const IpcHandleBytes& h) -> absl::StatusOr<FakeMapping> { return FakeMapping(&c, h[0]); },
      16);
  auto a1 = cache.Get(Handle(1));
  auto a2 = cache.Get(Handle(1));
  auto b = cache.Get(Handle(2));
  ASSERT_TRUE(a1.ok() && a2.ok() && b.ok());
  EXPECT_EQ(a1->get(), a2->get());
  EXPECT_EQ((*b)->tag(), 2);
  EXPECT_EQ(c.opened, 2);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(HandleCacheTest, OpenErrorsAreReturnedAndNotCached) {
  int attempts = 0;
  HandleCache<int> cache(
      [&](const IpcHandleBytes&) -> absl::StatusOr<int> {
        if (++attempts == 1) return absl::InvalidArgumentError("bad handle");
        return 7;
      },
      4);
  EXPECT_EQ(cache.Get(Handle(3)).status().code(), absl::StatusCode::kInvalidArgument);
  auto v = cache.Get(Handle(3));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(**v, 7);
}

TEST(HandleCacheTest, ClearClosesUnheldNowAndHeldOnRelease) {
  Counters c;
  HandleCache<FakeMapping> cache(
      [&](const IpcHandleBytes& h) -> absl::StatusOr<FakeMapping> { return FakeMapping(&c, h[0]); },
      16);
  auto held = cache.Get(Handle(1));
  ASSERT_TRUE(cache.Get(Handle(2)).ok());
  ASSERT_TRUE(held.ok());
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(c.closed, 1);  // handle 2; handle 1 is still held
  held->reset();
  EXPECT_EQ(c.closed, 2);
}

TEST(HandleCacheTest, EvictsOnlyUnusedEntriesWhenFull) {
  Counters c;
  HandleCache<FakeMapping> cache(
      [&](const IpcHandleBytes& h) -> absl::StatusOr<FakeMapping> { return FakeMapping(&c, h[0]); },
      2);
  auto held = cache.Get(Handle(1));
  ASSERT_TRUE(cache.Get(Handle(2)).ok());
  ASSERT_TRUE(cache.Get(Handle(3)).ok());  // evicts 2, keeps the held 1
  EXPECT_EQ(c.closed, 1);
  EXPECT_EQ(cache.size(), 2u);
  auto again = cache.Get(Handle(1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(held->get(), again->get());
}

// An opener for which handle 2 maps what stale handle 1 mapped: refused
// (ALREADY_EXISTS) while 1 is open.
HandleCache<FakeMapping>::Opener StaleOpener(Counters* c) {
  return [c](const IpcHandleBytes& h) -> absl::StatusOr<FakeMapping> {
    if (h[0] == 2 && c->opened > c->closed) return absl::AlreadyExistsError("already mapped");
    return FakeMapping(c, h[0]);
  };
}

// A stale entry in the way: the unused entries close and the open is tried
// once more.
TEST(HandleCacheTest, AnEntryInTheWayIsClosedAndTheOpenRetried) {
  Counters c;
  HandleCache<FakeMapping> cache(StaleOpener(&c), 16);
  ASSERT_TRUE(cache.Get(Handle(1)).ok());
  auto fresh = cache.Get(Handle(2));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ((*fresh)->tag(), 2);
  EXPECT_EQ(c.closed, 1);
  EXPECT_EQ(cache.size(), 1u);
}

// While the stale entry is still held, the open fails with the reason.
TEST(HandleCacheTest, AHeldEntryInTheWayFailsTheOpen) {
  Counters c;
  HandleCache<FakeMapping> cache(StaleOpener(&c), 16);
  auto held = cache.Get(Handle(1));
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(cache.Get(Handle(2)).status().code(), absl::StatusCode::kAlreadyExists);
}

// Entries unused since a cutoff close, unless someone holds them.
TEST(HandleCacheTest, EvictsEntriesUnusedSinceACutoff) {
  Counters c;
  HandleCache<FakeMapping> cache(
      [&](const IpcHandleBytes& h) -> absl::StatusOr<FakeMapping> { return FakeMapping(&c, h[0]); },
      16);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ASSERT_TRUE(cache.Get(Handle(1), t0).ok());
  auto held = cache.Get(Handle(2), t0);
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(cache.Get(Handle(3), t0 + absl::Seconds(50)).ok());
  ASSERT_TRUE(cache.Get(Handle(1), t0 + absl::Seconds(90)).ok());  // used again
  // Unused since before t0 + 60 s: 2 (held, so kept) and 3.
  EXPECT_EQ(cache.EvictUnusedSince(t0 + absl::Seconds(60)), 1u);
  EXPECT_EQ(c.closed, 1);  // handle 3
  EXPECT_EQ(cache.size(), 2u);
  held->reset();
  EXPECT_EQ(cache.EvictUnusedSince(t0 + absl::Seconds(60)), 1u);  // now 2
  EXPECT_EQ(cache.size(), 1u);
}

}  // namespace
}  // namespace kolo::cuda
