// Fuzzes SpscRing against a hostile peer: a sequence of pushes and pops on a
// ring whose indices the input may overwrite at any step (as the other
// process could). Whatever the indices, the ring must touch only its own
// slots (ASan guards the slot array, sized exactly to the capacity), report
// kCorrupt exactly when the distance between the indices exceeds the
// capacity, and hand back what was pushed while the peer behaves.
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "common/spsc_ring.h"
#include "tools/fuzz/fuzz_input.h"

namespace kolo {
namespace {

struct Slot {
  uint64_t seq;
  uint8_t payload[24];
};

enum Op : uint8_t { kPush, kPop, kSetTail, kSetHead, kQuery, kOpCount };

void Run(fuzz::FuzzInput& in) {
  const uint32_t capacity = uint32_t{1} << (in.Take<uint8_t>() % 7);  // 1..64
  auto tail = std::make_unique<abi::v1::RingIndex>();
  auto head = std::make_unique<abi::v1::RingIndex>();
  const uint64_t start = in.Take<uint64_t>();  // indices need not start at 0
  tail->value.store(start);
  head->value.store(start);
  auto slots = std::make_unique<Slot[]>(capacity);
  SpscRing<Slot> ring(tail.get(), head.get(), slots.get(), capacity);
  fuzz::Require(ring.capacity() == capacity);

  bool tampered = false;  // once the peer wrote an index, contents are its own
  uint64_t next_push = 0;
  uint64_t next_pop = 0;
  for (int step = 0; step < 4096 && !in.empty(); ++step) {
    const uint64_t t = tail->value.load();
    const uint64_t h = head->value.load();
    const uint64_t used = t - h;
    switch (in.Take<uint8_t>() % kOpCount) {
      case kPush: {
        Slot s{};
        s.seq = next_push;
        in.TakeBytes(s.payload, 4);
        RingResult r = ring.TryPush(s);
        if (used > capacity) {
          fuzz::Require(r == RingResult::kCorrupt);
        } else if (used == capacity) {
          fuzz::Require(r == RingResult::kEmptyOrFull);
        } else {
          fuzz::Require(r == RingResult::kOk && tail->value.load() == t + 1);
          ++next_push;
        }
        break;
      }
      case kPop: {
        Slot s{};
        RingResult r = ring.TryPop(&s);
        if (used > capacity) {
          fuzz::Require(r == RingResult::kCorrupt);
        } else if (used == 0) {
          fuzz::Require(r == RingResult::kEmptyOrFull);
        } else {
          fuzz::Require(r == RingResult::kOk && head->value.load() == h + 1);
          if (!tampered) fuzz::Require(s.seq == next_pop);
          ++next_pop;
        }
        break;
      }
      case kSetTail:
        tail->value.store(in.Take<uint64_t>());
        tampered = true;
        break;
      case kSetHead:
        head->value.store(in.Take<uint64_t>());
        tampered = true;
        break;
      case kQuery:
        fuzz::Require(ring.HasData() == (t != h));
        fuzz::Require(ring.HasSpace() == (used < capacity));
        break;
    }
  }
}

}  // namespace
}  // namespace kolo

KOLO_FUZZ_TARGET(kolo::Run)
