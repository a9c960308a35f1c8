#include "examples/bench/perf_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kolo::bench {
namespace {

std::string CheckText(int64_t wrong) {
  if (wrong < 0) return "-";
  if (wrong == 0) return "OK";
  return absl::StrCat("FAIL(", wrong, ")");
}

}  // namespace

std::vector<uint64_t> SweepSizes(uint64_t min_bytes, uint64_t max_bytes, uint64_t elem_size) {
  std::vector<uint64_t> sizes;
  if (elem_size == 0 || max_bytes < min_bytes) return sizes;
  for (uint64_t bytes = std::max<uint64_t>(min_bytes, 1);; bytes *= 2) {
    const uint64_t rounded = std::max(bytes / elem_size, uint64_t{1}) * elem_size;
    if (rounded > max_bytes) break;
    if (sizes.empty() || sizes.back() != rounded) sizes.push_back(rounded);
    if (bytes > max_bytes / 2) break;  // The next doubling would pass the max.
  }
  return sizes;
}

double Percentile(std::vector<double> samples, double q) {
  std::sort(samples.begin(), samples.end());
  const double rank = std::ceil(q * static_cast<double>(samples.size()));
  const size_t index =
      static_cast<size_t>(std::clamp(rank - 1, 0.0, static_cast<double>(samples.size() - 1)));
  return samples[index];
}

double Median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

Bandwidth AllreduceBandwidth(uint64_t bytes, double seconds, int ranks) {
  Bandwidth bw;
  if (seconds <= 0 || ranks < 1) return bw;
  bw.algbw_gbps = static_cast<double>(bytes) / seconds / 1e9;
  bw.busbw_gbps = bw.algbw_gbps * 2.0 * (ranks - 1) / ranks;
  return bw;
}

absl::StatusOr<ReduceOp> ParseReduceOp(std::string_view name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "average" || name == "avg") return ReduceOp::kAverage;
  if (name == "min") return ReduceOp::kMin;
  if (name == "max") return ReduceOp::kMax;
  if (name == "prod" || name == "product") return ReduceOp::kProduct;
  if (name == "adasum") return ReduceOp::kAdasum;
  return absl::InvalidArgumentError(absl::StrCat("unknown reduction \"",
                                                 absl::string_view(name.data(), name.size()),
                                                 "\" (want sum, average, min, max, prod or adasum)"));
}

float InputValue(ReduceOp op, int rank, uint64_t index) {
  const uint64_t r = static_cast<uint64_t>(rank);
  switch (op) {
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<float>(static_cast<int>((index * 7 + r * 3) % 23) - 11);
    case ReduceOp::kProduct: {
      static constexpr float kFactors[] = {1.0f, -1.0f, 2.0f};
      return kFactors[(index + r) % 3];
    }
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
    case ReduceOp::kAdasum:
      break;
  }
  return static_cast<float>(static_cast<int>((index + 3 * r) % 11) - 5);
}

float ExpectedValue(ReduceOp op, int ranks, uint64_t index) {
  double acc = InputValue(op, 0, index);
  for (int r = 1; r < ranks; ++r) {
    const double v = InputValue(op, r, index);
    switch (op) {
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        break;
      case ReduceOp::kAdasum:
        // Not elementwise: a NaN, so that no result ever checks against it.
        return std::numeric_limits<float>::quiet_NaN();
    }
  }
  if (op == ReduceOp::kAverage) acc /= ranks;
  return static_cast<float>(acc);
}

void FillInput(ReduceOp op, int rank, float* data, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) data[i] = InputValue(op, rank, i);
}

uint64_t CountMismatches(ReduceOp op, int ranks, const float* data, uint64_t count) {
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const float want = ExpectedValue(op, ranks, i);
    const bool ok = op == ReduceOp::kAverage
                        ? std::fabs(data[i] - want) <= 1e-6f + 1e-5f * std::fabs(want)
                        : data[i] == want;
    if (!ok) ++wrong;
  }
  return wrong;
}

std::string SweepHeader(bool csv) {
  if (csv) return "size_bytes,count,time_us,algbw_gbps,busbw_gbps,wrong\n";
  return absl::StrFormat("%12s %12s %11s %11s %11s %8s\n", "size(B)", "count", "time(us)",
                         "algbw(GB/s)", "busbw(GB/s)", "check");
}

std::string SweepLine(const SweepRow& row, bool csv) {
  if (csv) {
    return absl::StrFormat("%d,%d,%.3f,%.4f,%.4f,%d\n", row.bytes, row.count, row.time_us,
                           row.bw.algbw_gbps, row.bw.busbw_gbps, row.wrong);
  }
  return absl::StrFormat("%12d %12d %11.2f %11.3f %11.3f %8s\n", row.bytes, row.count, row.time_us,
                         row.bw.algbw_gbps, row.bw.busbw_gbps, CheckText(row.wrong));
}

std::string LatencyHeader(bool csv) {
  if (csv) return "size_bytes,iters,p50_us,p90_us,p99_us,wrong\n";
  return absl::StrFormat("%12s %10s %10s %10s %10s %8s\n", "size(B)", "iters", "p50(us)", "p90(us)",
                         "p99(us)", "check");
}

std::string LatencyLine(const LatencyRow& row, bool csv) {
  if (csv) {
    return absl::StrFormat("%d,%d,%.3f,%.3f,%.3f,%d\n", row.bytes, row.iters, row.p50_us,
                           row.p90_us, row.p99_us, row.wrong);
  }
  return absl::StrFormat("%12d %10d %10.2f %10.2f %10.2f %8s\n", row.bytes, row.iters, row.p50_us,
                         row.p90_us, row.p99_us, CheckText(row.wrong));
}

}  // namespace kolo::bench
