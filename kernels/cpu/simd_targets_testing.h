// ForEachTarget: a kernel test's body once on each SIMD target.
#pragma once

#include <cstdint>

#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace kolo::kernels {

// Runs `body` once with each SIMD target this binary has and the CPU runs,
// so every compiled kernel variant is checked, not only the best one; stops
// at a fatal failure.
template <class Body>
void ForEachTarget(Body body) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    body();
    if (::testing::Test::HasFatalFailure()) break;
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace kolo::kernels
