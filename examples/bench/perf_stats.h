// The arithmetic of Kolo's collective benchmarks, apart from any transport so
// that it can be tested: the size sweep, order statistics, bandwidth, test
// data whose reductions are exact in float32, and the result table.
//
// Thread-safety: free functions over values; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/kolo/abi/types.h"

namespace kolo::bench {

// Message sizes from `min_bytes` to `max_bytes`, doubling, each rounded down
// to a whole number of `elem_size` elements and at least one element. Empty
// when max_bytes < min_bytes.
std::vector<uint64_t> SweepSizes(uint64_t min_bytes, uint64_t max_bytes, uint64_t elem_size);

// The nearest-rank q-quantile (0 < q <= 1) of `samples`, which must not be
// empty.
double Percentile(std::vector<double> samples, double q);
// The middle sample, or the mean of the two middle ones.
double Median(std::vector<double> samples);

// algbw = bytes / time; busbw = algbw * 2(n-1)/n, the bytes each rank's link
// would move in a ring allreduce, so figures compare across rank counts.
// GB/s are 1e9 bytes per second.
struct Bandwidth {
  double algbw_gbps = 0;
  double busbw_gbps = 0;
};
Bandwidth AllreduceBandwidth(uint64_t bytes, double seconds, int ranks);

// "sum", "average" (or "avg"), "min", "max", "prod" (or "product").
absl::StatusOr<ReduceOp> ParseReduceOp(std::string_view name);

// Test data: rank `rank`'s element `index` for `op`. The values are small
// integers (or ±1 and 2 for products), so that every rank order gives the
// same, exact float32 result.
float InputValue(ReduceOp op, int rank, uint64_t index);
// The reduction of InputValue over ranks 0..ranks-1.
float ExpectedValue(ReduceOp op, int ranks, uint64_t index);
void FillInput(ReduceOp op, int rank, float* data, uint64_t count);
// How many of `data`'s `count` elements differ from ExpectedValue (exactly,
// or beyond a float rounding for kAverage).
uint64_t CountMismatches(ReduceOp op, int ranks, const float* data, uint64_t count);

// One line of the sweep table. `wrong` < 0 means the result was not checked.
struct SweepRow {
  uint64_t bytes = 0;
  uint64_t count = 0;
  double time_us = 0;
  Bandwidth bw;
  int64_t wrong = -1;
};
// The sweep table: fixed-width columns for people, or CSV with the header
// "size_bytes,count,time_us,algbw_gbps,busbw_gbps,wrong" (wrong: -1 when not
// checked). Both end in a newline.
std::string SweepHeader(bool csv);
std::string SweepLine(const SweepRow& row, bool csv);

// The latency line: percentiles of one small allreduce repeated.
struct LatencyRow {
  uint64_t bytes = 0;
  uint64_t iters = 0;
  double p50_us = 0;
  double p90_us = 0;
  double p99_us = 0;
  int64_t wrong = -1;
};
// CSV header "size_bytes,iters,p50_us,p90_us,p99_us,wrong".
std::string LatencyHeader(bool csv);
std::string LatencyLine(const LatencyRow& row, bool csv);

}  // namespace kolo::bench
