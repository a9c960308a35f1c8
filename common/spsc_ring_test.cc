#include "common/spsc_ring.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kolo {
namespace {

struct Slot {
  uint64_t value;
  char pad[24];
};

struct RingStorage {
  abi::v1::RingIndex tail{};
  abi::v1::RingIndex head{};
  std::vector<Slot> slots;
  explicit RingStorage(uint32_t cap) : slots(cap) {}
  SpscRing<Slot> ring() { return SpscRing<Slot>(&tail, &head, slots.data(), slots.size()); }
};

TEST(SpscRingTest, FifoAcrossWrapAround) {
  RingStorage s(4);
  auto ring = s.ring();
  uint64_t next_in = 0, next_out = 0;
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(ring.TryPush(Slot{next_in++, {}}), RingResult::kOk);
    }
    for (int i = 0; i < 3; ++i) {
      Slot out{};
      ASSERT_EQ(ring.TryPop(&out), RingResult::kOk);
      EXPECT_EQ(out.value, next_out++);
    }
  }
  EXPECT_GT(s.tail.value.load(), 16u);  // indices went round several times
}

TEST(SpscRingTest, FullAndEmpty) {
  RingStorage s(2);
  auto ring = s.ring();
  Slot out{};
  EXPECT_EQ(ring.TryPop(&out), RingResult::kEmptyOrFull);
  EXPECT_EQ(ring.TryPush(Slot{1, {}}), RingResult::kOk);
  EXPECT_EQ(ring.TryPush(Slot{2, {}}), RingResult::kOk);
  EXPECT_FALSE(ring.HasSpace());
  EXPECT_EQ(ring.TryPush(Slot{3, {}}), RingResult::kEmptyOrFull);
  EXPECT_EQ(ring.TryPop(&out), RingResult::kOk);
  EXPECT_EQ(out.value, 1u);
  EXPECT_TRUE(ring.HasSpace());
}

TEST(SpscRingTest, CorruptIndicesAreReportedNotUsed) {
  RingStorage s(4);
  auto ring = s.ring();
  Slot out{};
  // A hostile producer claims far more slots than exist.
  s.tail.value.store(1000);
  EXPECT_EQ(ring.TryPop(&out), RingResult::kCorrupt);
  // A hostile consumer runs ahead of the producer.
  s.tail.value.store(0);
  s.head.value.store(5);
  EXPECT_EQ(ring.TryPush(Slot{1, {}}), RingResult::kCorrupt);
}

TEST(SpscRingTest, TwoThreadsTransferInOrder) {
  RingStorage s(8);
  auto ring = s.ring();
  constexpr uint64_t kCount = 200000;
  std::thread producer([&] {
    for (uint64_t i = 0; i < kCount;) {
      if (ring.TryPush(Slot{i, {}}) == RingResult::kOk) ++i;
    }
  });
  uint64_t expect = 0;
  while (expect < kCount) {
    Slot out{};
    if (ring.TryPop(&out) == RingResult::kOk) {
      ASSERT_EQ(out.value, expect);
      ++expect;
    }
  }
  producer.join();
}

}  // namespace
}  // namespace kolo
