// soak_rank: one rank of a soak job (scripts/soak.sh starts it with the
// KOLO_* environment).
//
//   --mode=load: rounds of --inflight collectives of mixed kinds, dtypes and
//     sizes (SpecFor), all submitted before any is waited for, every result
//     checked; after each round the ranks agree through a small allreduce
//     whether to stop: once --duration_s has passed and --min_collectives are
//     done (or on the first error, or at --max_duration_s). Prints "warm"
//     after a first sweep of the largest sizes, progress lines, and a summary.
//   --mode=short: attach, one collective (collective --index), detach.
//
// Exits 0 only if every collective completed with the right result.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kolo/kolo.h"
#include "tests/soak/soak_collectives.h"

ABSL_FLAG(std::string, mode, "load", "load (a long job) or short (one collective)");
ABSL_FLAG(double, duration_s, 60, "load: run at least this long");
ABSL_FLAG(int64_t, min_collectives, 0, "load: and at least this many collectives");
ABSL_FLAG(double, max_duration_s, 0,
          "load: fail if the minimum is not reached by then (0: 2 x --duration_s + 60)");
ABSL_FLAG(int, inflight, 8, "load: collectives in flight at once");
ABSL_FLAG(int64_t, max_elements, int64_t{1} << 19, "largest tensor, in elements");
ABSL_FLAG(double, progress_s, 60, "load: seconds between progress lines");
ABSL_FLAG(uint64_t, seed, 1, "the collectives' sequence (the same on every rank)");
ABSL_FLAG(uint64_t, index, 0, "short: which collective of the sequence");

namespace {

using kolo::soak::Kind;
using kolo::soak::Pending;
using kolo::soak::Spec;
using kolo::soak::SpecFor;

struct Tally {
  int64_t collectives = 0;
  int64_t by_kind[kolo::soak::kNumKinds] = {};
  uint64_t bytes = 0;  // of the tensors this rank submitted
};

// Submits `specs` together, then waits for and checks each.
absl::Status RunRound(kolo::Client& c, std::vector<Spec> specs, Tally& tally) {
  std::vector<Pending> pending;
  absl::Status first_error;
  for (Spec& s : specs) {
    auto p = kolo::soak::Submit(c, std::move(s));
    if (!p.ok()) {
      first_error.Update(p.status());
      continue;
    }
    pending.push_back(*std::move(p));
  }
  for (Pending& p : pending) {
    const Kind kind = p.spec.kind;
    const uint64_t bytes = p.spec.elements * kolo::DTypeSize(p.spec.dtype);
    absl::Status s = kolo::soak::Complete(c, std::move(p));
    if (!s.ok()) {
      first_error.Update(s);
      continue;
    }
    ++tally.collectives;
    ++tally.by_kind[static_cast<int>(kind)];
    tally.bytes += bytes;
  }
  return first_error;
}

// Every rank's vote, combined: true once any rank wants to stop.
absl::StatusOr<bool> AgreeToStop(kolo::Client& c, bool stop) {
  int32_t v = stop ? 1 : 0;
  absl::Status s = c.Allreduce(kolo::ConstTensorView(&v, kolo::DType::kInt32, {1}),
                               kolo::TensorView{&v, kolo::DType::kInt32, {1}}, "soak/stop",
                               kolo::ReduceOp::kMax);
  if (!s.ok()) return s;
  return v != 0;
}

void PrintTally(const kolo::Client& c, const char* what, const Tally& t, absl::Duration took) {
  const double secs = absl::ToDoubleSeconds(took);
  std::printf("rank %d %s: %lld collectives in %.0f s (%.0f/s, %.1f MiB submitted;", c.rank(), what,
              static_cast<long long>(t.collectives), secs, secs > 0 ? t.collectives / secs : 0.0,
              t.bytes / 1048576.0);
  for (int k = 0; k < kolo::soak::kNumKinds; ++k) {
    std::printf(" %s %lld", kolo::soak::KindName(static_cast<Kind>(k)),
                static_cast<long long>(t.by_kind[k]));
  }
  std::printf(")\n");
  std::fflush(stdout);
}

// The largest size of every kind and dtype once, so the start sample sees
// buffers of every size already in use.
absl::Status Warmup(kolo::Client& c, Tally& tally) {
  const int64_t max_elements = absl::GetFlag(FLAGS_max_elements);
  std::vector<Spec> round;
  for (int k = 0; k < kolo::soak::kNumKinds; ++k) {
    for (uint32_t t = 0; t < kolo::kNumDTypes; ++t) {
      Spec s;
      s.kind = static_cast<Kind>(k);
      s.dtype = static_cast<kolo::DType>(t);
      s.elements = max_elements;
      s.cols = 2;
      s.salt = k + t;
      s.zero_copy = (k + t) % 2 == 0;
      s.name = absl::StrCat("soak/warmup/", k, "/", t);
      round.push_back(std::move(s));
    }
  }
  return RunRound(c, std::move(round), tally);
}

int RunLoad(kolo::Client& c) {
  const int inflight = absl::GetFlag(FLAGS_inflight);
  const absl::Duration duration = absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  const double max_s = absl::GetFlag(FLAGS_max_duration_s);
  const absl::Duration limit = max_s > 0 ? absl::Seconds(max_s) : 2 * duration + absl::Seconds(60);
  const int64_t min_collectives = absl::GetFlag(FLAGS_min_collectives);
  const absl::Duration progress = absl::Seconds(absl::GetFlag(FLAGS_progress_s));
  const absl::Time start = absl::Now();
  Tally tally;
  absl::Status error = Warmup(c, tally);
  std::printf("rank %d warm\n", c.rank());
  std::fflush(stdout);
  absl::Time next_progress = absl::Now() + progress;
  for (uint64_t index = 0;;) {
    const absl::Time now = absl::Now();
    const bool done = now - start >= duration && tally.collectives >= min_collectives;
    auto stop = AgreeToStop(c, !error.ok() || done || now - start >= limit);
    if (!stop.ok()) error.Update(stop.status());
    if (!stop.ok() || *stop) break;
    std::vector<Spec> round;
    for (int slot = 0; slot < inflight; ++slot, ++index) {
      round.push_back(SpecFor(absl::GetFlag(FLAGS_seed), index, slot, c.size(),
                              absl::GetFlag(FLAGS_max_elements)));
    }
    error.Update(RunRound(c, std::move(round), tally));
    if (now >= next_progress) {
      PrintTally(c, "progress", tally, now - start);
      next_progress = now + progress;
    }
  }
  PrintTally(c, "total", tally, absl::Now() - start);
  if (error.ok() && tally.collectives < min_collectives) {
    error = absl::DeadlineExceededError(
        absl::StrCat(tally.collectives, " collectives by the limit, fewer than ", min_collectives));
  }
  if (!error.ok()) {
    std::fprintf(stderr, "rank %d FAILED: %s\n", c.rank(), error.ToString().c_str());
    return 1;
  }
  return 0;
}

int RunShort(kolo::Client& c) {
  Tally tally;
  const uint64_t index = absl::GetFlag(FLAGS_index);
  absl::Status s = RunRound(c,
                            {SpecFor(absl::GetFlag(FLAGS_seed), index, 0, c.size(),
                                     std::min<int64_t>(absl::GetFlag(FLAGS_max_elements), 100000))},
                            tally);
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d short job %llu FAILED: %s\n", c.rank(),
                 static_cast<unsigned long long>(index), s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "load" && mode != "short") {
    std::fprintf(stderr, "soak_rank: --mode must be load or short, not %s\n", mode.c_str());
    return 2;
  }
  auto options = kolo::ClientOptions::FromEnv();
  if (!options.ok()) {
    std::fprintf(stderr, "soak_rank: %s\n", options.status().ToString().c_str());
    return 2;
  }
  auto client = kolo::Client::Connect(*options);
  if (!client.ok()) {
    std::fprintf(stderr, "soak_rank: connect: %s\n", client.status().ToString().c_str());
    return 2;
  }
  return mode == "load" ? RunLoad(**client) : RunShort(**client);
}
