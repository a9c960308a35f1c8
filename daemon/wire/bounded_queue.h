// BoundedQueue: a FIFO of items waiting for one writer, bounded both in
// items and in bytes (the caller says what each item weighs). An empty
// queue takes one item of any weight, so the largest legitimate message
// always fits; past either bound Push refuses, and the owner decides what
// that means (the Peer service cuts off a member that stopped reading).
//
// Thread-safety: not thread-safe; its owner guards it with its own lock.
#pragma once

#include <cstddef>
#include <deque>
#include <utility>

namespace kolo::daemon {

template <typename T>
class BoundedQueue {
 public:
  BoundedQueue(size_t max_items, size_t max_bytes) : max_items_(max_items), max_bytes_(max_bytes) {}

  // Queues `item` of `bytes`; false (and nothing queued) when that would
  // pass a bound of a queue that is not empty.
  bool Push(T item, size_t bytes) {
    if (!items_.empty() &&
        (items_.size() >= max_items_ || bytes_ > max_bytes_ || bytes > max_bytes_ - bytes_)) {
      return false;
    }
    items_.emplace_back(std::move(item), bytes);
    bytes_ += bytes;
    return true;
  }
  // The oldest item; the queue must not be empty.
  T Pop() {
    auto [item, bytes] = std::move(items_.front());
    items_.pop_front();
    bytes_ -= bytes;
    return std::move(item);
  }
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  size_t bytes() const { return bytes_; }

 private:
  const size_t max_items_;
  const size_t max_bytes_;
  std::deque<std::pair<T, size_t>> items_;
  size_t bytes_ = 0;
};

}  // namespace kolo::daemon
