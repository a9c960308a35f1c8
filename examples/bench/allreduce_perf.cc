// allreduce_perf: Kolo's allreduce bandwidth and latency benchmark.
//
// Run one process per rank under kolorun:
//   kolorun -np 2 -- allreduce_perf [--min_bytes=4] [--max_bytes=268435456]
//       [--iters=20] [--warmup=5] [--op=sum] [--copy] [--csv]
//   kolorun -np 2 -- allreduce_perf --latency [--latency_iters=20000]
//
// Sweep: for each size (doubling from min to max) every rank runs `warmup`
// untimed, then `iters` individually timed, in-place float32 allreduces of
// one tensor under one name ("perf/<bytes>"), then one more on fresh test
// data whose result it checks. The time printed is the maximum over ranks of
// each rank's median (the slowest rank bounds a synchronous step), gathered
// with a small max-allreduce; `check` is the maximum over ranks of wrong
// elements (OK when none). algbw = size / time; busbw = algbw * 2(n-1)/n.
//
// Tensors live in SDK-allocated shared memory (zero copy) unless --copy asks
// for the process's own memory (the SDK then copies in and out).
//
// Latency: an 8-byte allreduce repeated; p50/p90/p99 of the per-call times,
// each the maximum over ranks.
//
// Rank 0 prints; --csv prints comma-separated rows (see perf_stats.h) for
// scripts, with '#' comment lines.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "examples/bench/perf_stats.h"
#include "kolo/kolo.h"

ABSL_FLAG(uint64_t, min_bytes, 4, "Smallest message size in bytes.");
ABSL_FLAG(uint64_t, max_bytes, uint64_t{256} << 20, "Largest message size in bytes.");
ABSL_FLAG(int, iters, 20, "Timed allreduces per size.");
ABSL_FLAG(int, warmup, 5, "Untimed allreduces per size before timing.");
ABSL_FLAG(std::string, op, "sum", "Reduction: sum, average, min, max or prod.");
ABSL_FLAG(bool, copy, false, "Use the process's own memory instead of SDK shared memory.");
ABSL_FLAG(bool, check, true, "Verify each size's result.");
ABSL_FLAG(bool, csv, false, "Print CSV rows instead of a table.");
ABSL_FLAG(bool, latency, false, "Measure the latency of a small allreduce instead of the sweep.");
ABSL_FLAG(uint64_t, latency_bytes, 8, "Message size in latency mode.");
ABSL_FLAG(int, latency_iters, 20000, "Timed allreduces in latency mode.");
ABSL_FLAG(int, latency_warmup, 1000, "Untimed allreduces in latency mode.");

namespace kolo::bench {
namespace {

// Everything the flags say, read once.
struct BenchConfig {
  uint64_t min_bytes = 4;
  uint64_t max_bytes = uint64_t{256} << 20;
  int iters = 20;
  int warmup = 5;
  ReduceOp op = ReduceOp::kSum;
  std::string op_name = "sum";
  bool copy = false;
  bool check = true;
  bool csv = false;
  bool latency = false;
  uint64_t latency_bytes = 8;
  int latency_iters = 20000;
  int latency_warmup = 1000;
};

absl::StatusOr<BenchConfig> ConfigFromFlags() {
  BenchConfig c;
  c.min_bytes = absl::GetFlag(FLAGS_min_bytes);
  c.max_bytes = absl::GetFlag(FLAGS_max_bytes);
  c.iters = absl::GetFlag(FLAGS_iters);
  c.warmup = absl::GetFlag(FLAGS_warmup);
  c.op_name = absl::GetFlag(FLAGS_op);
  absl::StatusOr<ReduceOp> op = ParseReduceOp(c.op_name);
  if (!op.ok()) return op.status();
  c.op = *op;
  c.copy = absl::GetFlag(FLAGS_copy);
  c.check = absl::GetFlag(FLAGS_check);
  c.csv = absl::GetFlag(FLAGS_csv);
  c.latency = absl::GetFlag(FLAGS_latency);
  c.latency_bytes = absl::GetFlag(FLAGS_latency_bytes);
  c.latency_iters = absl::GetFlag(FLAGS_latency_iters);
  c.latency_warmup = absl::GetFlag(FLAGS_latency_warmup);
  if (c.iters < 1 || c.latency_iters < 1) {
    return absl::InvalidArgumentError("--iters and --latency_iters must be >= 1");
  }
  if (c.warmup < 0 || c.latency_warmup < 0) {
    return absl::InvalidArgumentError("warmup counts must be >= 0");
  }
  if (c.max_bytes < sizeof(float) || c.min_bytes > c.max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("want 4 <= --max_bytes and --min_bytes <= --max_bytes, got ", c.min_bytes,
                     " and ", c.max_bytes));
  }
  return c;
}

// The float32 buffer the collectives run on: SDK shared memory or a plain
// vector. Views of its first elements are tensors of any smaller size.
// Thread-safety: owned by the main thread.
class BenchBuffer {
 public:
  static absl::StatusOr<BenchBuffer> Create(Client& client, uint64_t count, bool copy) {
    BenchBuffer b;
    if (copy) {
      b.own_.assign(count, 0.0f);
      b.data_ = b.own_.data();
    } else {
      absl::StatusOr<HostBuffer> shm =
          client.Allocate(DType::kFloat32, {static_cast<int64_t>(count)});
      if (!shm.ok()) return shm.status();
      b.shm_ = std::make_unique<HostBuffer>(*std::move(shm));
      b.data_ = b.shm_->data_as<float>();
    }
    return b;
  }
  float* data() const { return data_; }
  TensorView view(uint64_t count) const {
    return TensorView{data_, DType::kFloat32, {static_cast<int64_t>(count)}};
  }

 private:
  std::unique_ptr<HostBuffer> shm_;
  std::vector<float> own_;
  float* data_ = nullptr;
};

double MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

// The element-wise maximum of `values` over ranks (in the process's own
// memory: a few bytes, the copy costs nothing).
absl::Status MaxOverRanks(Client& client, const std::string& name, std::vector<float>& values) {
  TensorView v{values.data(), DType::kFloat32, {static_cast<int64_t>(values.size())}};
  return client.Allreduce(v, v, name, ReduceOp::kMax);
}

// Warms up, times `iters` in-place allreduces under `name`, then (if asked)
// runs one more on fresh data and counts wrong elements. Fills `times_us`.
absl::Status MeasureOne(Client& client, const BenchConfig& config, const BenchBuffer& buffer,
                        uint64_t count, const std::string& name, int warmup, int iters,
                        std::vector<double>* times_us, int64_t* wrong) {
  const TensorView view = buffer.view(count);
  FillInput(config.op, client.rank(), buffer.data(), count);
  for (int i = 0; i < warmup; ++i) {
    absl::Status s = client.Allreduce(view, view, name, config.op);
    if (!s.ok()) return s;
  }
  times_us->clear();
  times_us->reserve(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = client.Allreduce(view, view, name, config.op);
    times_us->push_back(MicrosSince(start));
    if (!s.ok()) return s;
  }
  *wrong = -1;
  if (config.check) {
    FillInput(config.op, client.rank(), buffer.data(), count);
    absl::Status s = client.Allreduce(view, view, name, config.op);
    if (!s.ok()) return s;
    *wrong = static_cast<int64_t>(CountMismatches(config.op, client.size(), buffer.data(), count));
  }
  return absl::OkStatus();
}

void PrintPreamble(const Client& client, const BenchConfig& config, const char* what) {
  std::printf(
      "# kolo allreduce_perf %s: %d ranks, float32 %s, in place, %s\n"
      "# time: max over ranks of each rank's median (latency: of each "
      "percentile)\n",
      what, client.size(), config.op_name.c_str(),
      config.copy ? "process memory (copied in and out)" : "SDK shared memory (zero copy)");
}

absl::Status RunSweep(Client& client, const BenchConfig& config) {
  const std::vector<uint64_t> sizes = SweepSizes(config.min_bytes, config.max_bytes, sizeof(float));
  absl::StatusOr<BenchBuffer> buffer =
      BenchBuffer::Create(client, sizes.back() / sizeof(float), config.copy);
  if (!buffer.ok()) return buffer.status();
  const bool printer = client.rank() == 0;
  if (printer) {
    PrintPreamble(client, config, "sweep");
    std::printf("# warmup %d, iters %d\n%s", config.warmup, config.iters,
                SweepHeader(config.csv).c_str());
    std::fflush(stdout);
  }
  std::vector<double> times;
  for (uint64_t bytes : sizes) {
    const uint64_t count = bytes / sizeof(float);
    int64_t wrong = -1;
    absl::Status s = MeasureOne(client, config, *buffer, count, absl::StrCat("perf/", bytes),
                                config.warmup, config.iters, &times, &wrong);
    if (!s.ok()) return s;
    std::vector<float> stats = {static_cast<float>(Median(times)), static_cast<float>(wrong)};
    s = MaxOverRanks(client, absl::StrCat("perf/stats/", bytes), stats);
    if (!s.ok()) return s;
    if (printer) {
      const SweepRow row{.bytes = bytes,
                         .count = count,
                         .time_us = stats[0],
                         .bw = AllreduceBandwidth(bytes, stats[0] * 1e-6, client.size()),
                         .wrong = static_cast<int64_t>(stats[1])};
      std::fputs(SweepLine(row, config.csv).c_str(), stdout);
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

absl::Status RunLatency(Client& client, const BenchConfig& config) {
  const uint64_t count = std::max<uint64_t>(config.latency_bytes / sizeof(float), 1);
  absl::StatusOr<BenchBuffer> buffer = BenchBuffer::Create(client, count, config.copy);
  if (!buffer.ok()) return buffer.status();
  std::vector<double> times;
  int64_t wrong = -1;
  absl::Status s = MeasureOne(client, config, *buffer, count, "perf/latency", config.latency_warmup,
                              config.latency_iters, &times, &wrong);
  if (!s.ok()) return s;
  std::vector<float> stats = {
      static_cast<float>(Percentile(times, 0.50)), static_cast<float>(Percentile(times, 0.90)),
      static_cast<float>(Percentile(times, 0.99)), static_cast<float>(wrong)};
  s = MaxOverRanks(client, "perf/stats/latency", stats);
  if (!s.ok()) return s;
  if (client.rank() == 0) {
    PrintPreamble(client, config, "latency");
    std::printf("# warmup %d\n%s", config.latency_warmup, LatencyHeader(config.csv).c_str());
    const LatencyRow row{.bytes = count * sizeof(float),
                         .iters = static_cast<uint64_t>(config.latency_iters),
                         .p50_us = stats[0],
                         .p90_us = stats[1],
                         .p99_us = stats[2],
                         .wrong = static_cast<int64_t>(stats[3])};
    std::fputs(LatencyLine(row, config.csv).c_str(), stdout);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

int Fail(int rank, const absl::Status& status) {
  std::fprintf(stderr, "allreduce_perf: rank %d: %s\n", rank, status.ToString().c_str());
  return 1;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Kolo allreduce benchmark; run under kolorun, e.g.\n"
      "  kolorun -np 2 -- allreduce_perf [--max_bytes=N] [--latency]");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<BenchConfig> config = ConfigFromFlags();
  if (!config.ok()) return Fail(-1, config.status());

  absl::StatusOr<ClientOptions> options = ClientOptions::FromEnv();
  if (!options.ok()) return Fail(-1, options.status());
  // The arena must hold the largest tensor, and with --copy the SDK's
  // staging copies of input and output; it is sparse, so asking is cheap.
  const uint64_t largest = config->latency ? config->latency_bytes : config->max_bytes;
  options->arena_bytes = std::max(options->arena_bytes, 2 * largest + (uint64_t{64} << 20));
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(*options);
  if (!client.ok()) return Fail(options->rank, client.status());

  absl::Status s = config->latency ? RunLatency(**client, *config) : RunSweep(**client, *config);
  if (!s.ok()) return Fail((*client)->rank(), s);
  return 0;
}

}  // namespace
}  // namespace kolo::bench

int main(int argc, char** argv) { return kolo::bench::Main(argc, argv); }
