// kolorun's clock for deadlines and back-offs, and absl durations on it.
#pragma once

#include <algorithm>
#include <chrono>

#include "absl/time/time.h"

namespace kolo::kolorun {

using Clock = std::chrono::steady_clock;

// `d` on Clock, at most a century, so that now + it cannot overflow (a
// flag given as a huge number of seconds means "never").
inline Clock::duration ToClock(absl::Duration d) {
  d = std::min(d, absl::Hours(24 * 365 * 100));
  return std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(d));
}

}  // namespace kolo::kolorun
