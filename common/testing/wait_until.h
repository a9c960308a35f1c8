// How a test waits for something to happen, or makes sure that something
// does not: it polls a condition against a deadline instead of sleeping a
// fixed time and hoping the other thread got there.
// Every test in the tree that waits on a condition goes through these two.
//
// Thread-safety: thread-safe; `cond` runs on the calling thread only, so it
// must read state other threads write through their own locks or atomics.
#pragma once

#include <functional>

#include "absl/time/time.h"

namespace kolo {

// Calls `cond` until it returns true or `timeout` has passed, sleeping
// `poll` between calls. Returns whether `cond` returned true; it is called
// once more at the deadline, so a condition that became true while the
// caller slept is never reported as a timeout. `timeout` is a bound for a
// broken test, not a measurement: make it generous (seconds).
bool WaitUntil(const std::function<bool()>& cond, absl::Duration timeout,
               absl::Duration poll = absl::Milliseconds(1));

// The one honest fixed wait: calls `cond` for `duration` and returns true
// when it stayed false throughout (false as soon as it returns true). Use it
// for "X must not happen within `duration`", never to let something happen.
bool StaysFalse(const std::function<bool()>& cond, absl::Duration duration,
                absl::Duration poll = absl::Milliseconds(1));

}  // namespace kolo
