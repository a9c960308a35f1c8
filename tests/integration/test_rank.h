// test_rank: one rank of an integration scenario (test_rank.cc has main).
// The scenarios, in files by theme, check every result they get and count
// what was wrong in `failures`.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "kolo/kolo.h"

namespace kolo::testing::rank {

// Checks that failed so far in this process.
inline int failures = 0;

#define CHECK_OR_COUNT(cond, ...)                               \
  do {                                                          \
    if (!(cond)) {                                              \
      ++::kolo::testing::rank::failures;                        \
      std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                        \
      std::fprintf(stderr, "\n");                               \
    }                                                           \
  } while (0)

// One allreduce of `count` elements; zero copy or through the caller's memory.
void CheckAllreduce(kolo::Client& c, DType t, ReduceOp op, int64_t count, bool zero_copy,
                    const std::string& name);
// `s` is the FAILED_PRECONDITION of ranks that disagree, naming a rank.
void ExpectMismatch(kolo::Client& c, absl::Status s, const char* what);
// Submits an allreduce of `v` named `prefix` and this rank (no other rank
// submits it), prints `announce` and waits: what ends the job from outside
// decides the status.
absl::Status WaitOnOwnName(kolo::Client& c, kolo::TensorView v, const std::string& prefix,
                           const char* announce);

// test_rank_collectives.cc
void ScenarioMatrix(kolo::Client& c);
void ScenarioSizes(kolo::Client& c);
void ScenarioInflight(kolo::Client& c);
void ScenarioBroadcast(kolo::Client& c);
void ScenarioPartsInAnyOrder(kolo::Client& c);
void ScenarioUnderway(kolo::Client& c);
// test_rank_failures.cc
void ScenarioMismatch(kolo::Client& c);
void ScenarioDuplicate(kolo::Client& c);
void ScenarioRankDies(kolo::Client& c);
void ScenarioDaemonDies(kolo::Client& c);
void ScenarioWithhold(kolo::Client& c);
void ScenarioWithholdCached(kolo::Client& c);
// test_rank_surface.cc
void ScenarioSurface(kolo::Client& c);
void ScenarioJoin(kolo::Client& c);
void ScenarioHold(kolo::Client& c);
void ScenarioMultiNodeSurface(kolo::Client& c);

}  // namespace kolo::testing::rank
