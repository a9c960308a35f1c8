// SpscRing: a single-producer/single-consumer ring of plain-data slots over
// memory that another process shares (and may corrupt).
//
// Indices grow without wrapping (64-bit) and are reduced modulo the
// power-of-two capacity. The producer owns `tail`, the consumer owns `head`;
// each side reads the other's index, which is untrusted: a distance outside
// [0, capacity] is reported as kCorrupt and never used to index memory.
// Slots are copied in and out whole, so a peer that rewrites a slot after
// handing it over cannot change what was validated.
//
// Thread-safety: one producer thread and one consumer thread at a time
// (callers serialize each side with their own lock when needed).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo {

enum class RingResult { kOk, kEmptyOrFull, kCorrupt };

template <typename Slot>
class SpscRing {
  static_assert(std::is_trivially_copyable_v<Slot>);

 public:
  SpscRing() = default;
  // `capacity` must be a power of two; `slots` must hold that many.
  SpscRing(abi::v1::RingIndex* tail, abi::v1::RingIndex* head, Slot* slots, uint32_t capacity)
      : tail_(tail), head_(head), slots_(slots), mask_(capacity - 1) {}

  uint32_t capacity() const { return mask_ + 1; }

  // Producer side.
  RingResult TryPush(const Slot& slot) {
    uint64_t tail = tail_->value.load(std::memory_order_relaxed);
    uint64_t head = head_->value.load(std::memory_order_acquire);
    uint64_t used = tail - head;
    if (used > capacity()) return RingResult::kCorrupt;
    if (used == capacity()) return RingResult::kEmptyOrFull;
    std::memcpy(&slots_[tail & mask_], &slot, sizeof(Slot));
    tail_->value.store(tail + 1, std::memory_order_release);
    return RingResult::kOk;
  }

  // Consumer side.
  RingResult TryPop(Slot* out) {
    uint64_t head = head_->value.load(std::memory_order_relaxed);
    uint64_t tail = tail_->value.load(std::memory_order_acquire);
    uint64_t avail = tail - head;
    if (avail > capacity()) return RingResult::kCorrupt;
    if (avail == 0) return RingResult::kEmptyOrFull;
    std::memcpy(out, &slots_[head & mask_], sizeof(Slot));
    head_->value.store(head + 1, std::memory_order_release);
    return RingResult::kOk;
  }

  // Either side: whether the consumer has something to pop.
  bool HasData() const {
    return tail_->value.load(std::memory_order_acquire) !=
           head_->value.load(std::memory_order_acquire);
  }
  // Either side: whether the producer has room.
  bool HasSpace() const {
    return tail_->value.load(std::memory_order_acquire) -
               head_->value.load(std::memory_order_acquire) <
           capacity();
  }

 private:
  abi::v1::RingIndex* tail_ = nullptr;
  abi::v1::RingIndex* head_ = nullptr;
  Slot* slots_ = nullptr;
  uint32_t mask_ = 0;
};

}  // namespace kolo
