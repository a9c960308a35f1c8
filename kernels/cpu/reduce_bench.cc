// Single-core throughput of the reduction kernels against memcpy moving the
// same bytes. "GB/s" counts every byte read and written (sources + dsts), so
// a kernel at memory bandwidth shows the same figure as memcpy.
//
// Usage: bazel run //kernels/cpu:reduce_bench -- --benchmark_filter=f32

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/reduce.h"
#include "proto/kolo/abi/types.h"

namespace kolo::kernels {
namespace {

constexpr int64_t kMiB = 1 << 20;

void ReportBytes(benchmark::State& state, int64_t bytes_per_iteration) {
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes_per_iteration),
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

// range(0): bytes per array; range(1): sources; range(2): destinations.
void BM_Reduce(benchmark::State& state, DType dtype) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t num_srcs = static_cast<size_t>(state.range(1));
  const size_t num_dsts = static_cast<size_t>(state.range(2));
  const size_t count = bytes / DTypeSize(dtype);
  // Filled with small values that are valid in every dtype; also faults in
  // every page before timing starts.
  std::vector<std::vector<uint8_t>> srcs(num_srcs, std::vector<uint8_t>(bytes, 0x3C));
  std::vector<std::vector<uint8_t>> dsts(num_dsts, std::vector<uint8_t>(bytes, 0));
  std::vector<const void*> src_ptrs;
  std::vector<void*> dst_ptrs;
  for (auto& s : srcs) src_ptrs.push_back(s.data());
  for (auto& d : dsts) dst_ptrs.push_back(d.data());
  for (auto _ : state) {
    const absl::Status status = Reduce(dtype, ReduceOp::kSum, src_ptrs, dst_ptrs, count);
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
    benchmark::ClobberMemory();
  }
  ReportBytes(state, static_cast<int64_t>((num_srcs + num_dsts) * bytes));
}

// The same traffic as a two-source, two-destination reduction: two arrays
// read and two written.
void BM_Memcpy2x(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> s0(bytes, 1), s1(bytes, 2), d0(bytes, 0), d1(bytes, 0);
  for (auto _ : state) {
    std::memcpy(d0.data(), s0.data(), bytes);
    std::memcpy(d1.data(), s1.data(), bytes);
    benchmark::ClobberMemory();
  }
  ReportBytes(state, static_cast<int64_t>(4 * bytes));
}

BENCHMARK_CAPTURE(BM_Reduce, f32_sum, DType::kFloat32)
    ->ArgNames({"bytes", "srcs", "dsts"})
    ->Args({64 * kMiB, 2, 2})
    ->Args({256 * 1024, 2, 2})
    ->Args({16 * kMiB, 8, 1})
    ->Args({16 * kMiB, 2, 8})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Memcpy2x)
    ->ArgNames({"bytes"})
    ->Arg(64 * kMiB)
    ->Arg(256 * 1024)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Reduce, f64_sum, DType::kFloat64)
    ->ArgNames({"bytes", "srcs", "dsts"})
    ->Args({64 * kMiB, 2, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Reduce, f16_sum, DType::kFloat16)
    ->ArgNames({"bytes", "srcs", "dsts"})
    ->Args({64 * kMiB, 2, 2})
    ->Args({256 * 1024, 2, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Reduce, bf16_sum, DType::kBFloat16)
    ->ArgNames({"bytes", "srcs", "dsts"})
    ->Args({64 * kMiB, 2, 2})
    ->Args({256 * 1024, 2, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kolo::kernels

BENCHMARK_MAIN();
