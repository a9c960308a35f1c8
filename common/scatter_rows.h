// How a reducescatter splits its tensor's first dimension over a process
// set: position i of n gets total / n rows, and the first total % n
// positions one more, in position order. The SDK sizes a device output by
// it and kolod's device backend places each position's rows by it.
//
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kolo {

inline int64_t ScatterRows(int64_t total, int64_t n, int64_t i) {
  return total / n + (i < total % n ? 1 : 0);
}

inline int64_t ScatterFirstRow(int64_t total, int64_t n, int64_t i) {
  return i * (total / n) + std::min(i, total % n);
}

}  // namespace kolo
