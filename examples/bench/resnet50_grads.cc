// resnet50_grads: one data-parallel training step's gradient exchange for
// ResNet-50, through Kolo.
//
// Run one process per rank under kolorun:
//   kolorun -np 2 -- resnet50_grads [--steps=20] [--warmup=3] [--check] [--csv]
//   resnet50_grads --print_shapes      (the tensor table, no daemon needed)
//
// Each step submits the 161 gradients of ResNet-50 (resnet50_shapes.h;
// 25,557,032 float32 values, 102,228,128 bytes) in backward order, the last
// layer first, each as its own in-place average AllreduceAsync named
// "grad/<parameter>", all in flight at once, then waits for all of them: what
// a framework hook does, leaving kolod to fuse them. Gradients live in
// SDK-allocated shared memory, one buffer per tensor. Values are left as the
// previous step's averages; the exchange does not depend on them.
//
// Reported by rank 0, over the `steps` timed steps after `warmup` untimed
// ones: the step time (for each step the maximum over ranks, then the median
// and p90 over steps), tensors per second (161 / median), algbw and busbw of
// the step's bytes (perf_stats.h), and the fusion ratio: tensors per fused
// response, read from kolod's Status service (GetStatus job counters, the
// growth over the timed steps; the barriers that bracket them are taken out).
// --check then runs one more step on known values (perf_stats.h test data,
// numbered across the whole parameter list) and counts wrong elements, the
// maximum over ranks.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "examples/bench/job_counters.h"
#include "examples/bench/perf_stats.h"
#include "examples/bench/resnet50_shapes.h"
#include "kolo/kolo.h"

ABSL_FLAG(int, steps, 20, "Timed steps.");
ABSL_FLAG(int, warmup, 3, "Untimed steps before timing.");
ABSL_FLAG(bool, check, false, "After timing, run one step on known values and verify it.");
ABSL_FLAG(bool, csv, false, "Print a CSV row instead of a table.");
ABSL_FLAG(std::string, op, "average", "The reduction: average or adasum (or sum, min, max, prod).");
ABSL_FLAG(bool, print_shapes, false, "Print the gradient table (backward order) and exit.");

namespace kolo::bench {
namespace {

struct BenchConfig {
  int steps = 20;
  int warmup = 3;
  bool check = false;
  bool csv = false;
  ReduceOp op = ReduceOp::kAverage;
};

absl::StatusOr<BenchConfig> ConfigFromFlags() {
  BenchConfig c;
  c.steps = absl::GetFlag(FLAGS_steps);
  c.warmup = absl::GetFlag(FLAGS_warmup);
  c.check = absl::GetFlag(FLAGS_check);
  c.csv = absl::GetFlag(FLAGS_csv);
  KOLO_ASSIGN_OR_RETURN(c.op, ParseReduceOp(absl::GetFlag(FLAGS_op)));
  if (c.check && c.op != ReduceOp::kAverage) {
    return absl::InvalidArgumentError("--check verifies --op=average only");
  }
  if (c.steps < 1 || c.warmup < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("want --steps >= 1 and --warmup >= 0, got ", c.steps, " and ", c.warmup));
  }
  return c;
}

// The gradient list, in backward order; aborts if the generated table is not
// ResNet-50's, since every figure printed would then be wrong.
std::vector<GradientTensor> Gradients() {
  std::vector<GradientTensor> grads = BackwardOrder(ResNet50Parameters());
  if (static_cast<int>(grads.size()) != kResNet50Tensors ||
      TotalElements(grads) != kResNet50Parameters) {
    std::fprintf(stderr,
                 "resnet50_grads: generated %zu tensors of %lld parameters, "
                 "want %d of %lld\n",
                 grads.size(), static_cast<long long>(TotalElements(grads)), kResNet50Tensors,
                 static_cast<long long>(kResNet50Parameters));
    std::abort();
  }
  return grads;
}

// The model's gradients in the session's shared memory, one buffer per
// tensor, with the names they are submitted under. Owned by the main thread.
struct GradientSet {
  std::vector<std::string> names;  // "grad/<parameter>"
  std::vector<HostBuffer> buffers;
  std::vector<int64_t> offsets;  // index of element 0 in the flat list
};

absl::StatusOr<GradientSet> AllocateGradients(Client& client,
                                              const std::vector<GradientTensor>& grads) {
  GradientSet set;
  int64_t offset = 0;
  for (const GradientTensor& g : grads) {
    KOLO_ASSIGN_OR_RETURN(HostBuffer b, client.Allocate(DType::kFloat32, g.shape));
    set.names.push_back(absl::StrCat("grad/", g.name));
    set.buffers.push_back(std::move(b));
    set.offsets.push_back(offset);
    offset += g.num_elements();
  }
  return set;
}

// One step: every gradient submitted (in order), then every one waited for.
absl::Status Step(Client& client, const GradientSet& set, std::vector<Handle>& handles,
                  ReduceOp op = ReduceOp::kAverage) {
  const AllreduceOptions options{.op = op};
  handles.clear();
  for (size_t i = 0; i < set.buffers.size(); ++i) {
    const TensorView view = set.buffers[i].view();
    KOLO_ASSIGN_OR_RETURN(Handle h, client.AllreduceAsync(view, view, set.names[i], options));
    handles.push_back(h);
  }
  // Wait for all even after a failure, so no handle is left behind.
  absl::Status result;
  for (Handle h : handles) result.Update(client.Wait(h));
  return result;
}

// Fills every gradient with test data numbered across the whole list, runs
// one step and counts the elements that differ from the expected average.
absl::StatusOr<int64_t> CheckStep(Client& client, const GradientSet& set) {
  for (size_t i = 0; i < set.buffers.size(); ++i) {
    float* data = set.buffers[i].data_as<float>();
    const uint64_t n = set.buffers[i].byte_size() / sizeof(float);
    const uint64_t base = static_cast<uint64_t>(set.offsets[i]);
    for (uint64_t j = 0; j < n; ++j) {
      data[j] = InputValue(ReduceOp::kAverage, client.rank(), base + j);
    }
  }
  std::vector<Handle> handles;
  KOLO_RETURN_IF_ERROR(Step(client, set, handles));
  int64_t wrong = 0;
  for (size_t i = 0; i < set.buffers.size(); ++i) {
    const float* data = set.buffers[i].data_as<float>();
    const uint64_t n = set.buffers[i].byte_size() / sizeof(float);
    const uint64_t base = static_cast<uint64_t>(set.offsets[i]);
    for (uint64_t j = 0; j < n; ++j) {
      const float want = ExpectedValue(ReduceOp::kAverage, client.size(), base + j);
      if (std::abs(data[j] - want) > 1e-6f + 1e-5f * std::abs(want)) ++wrong;
    }
  }
  return wrong;
}

// What rank 0 prints.
struct Result {
  int ranks = 0;
  int steps = 0;
  uint64_t bytes = 0;
  double median_ms = 0;
  double p90_ms = 0;
  double tensors_per_s = 0;
  Bandwidth bw;
  FusionDelta fusion;
  uint64_t fusion_threshold_bytes = 0;
  int64_t wrong = -1;
};

void Print(const Result& r, bool csv) {
  const std::string check =
      r.wrong < 0 ? "-" : (r.wrong == 0 ? "OK" : absl::StrCat("FAIL(", r.wrong, ")"));
  if (csv) {
    // The columns mpi_resnet50_grads prints too; compare_resnet50.sh joins
    // them. tensors_per_response: per fused kolod response.
    std::printf(
        "variant,ranks,tensors,bytes,steps,median_ms,p90_ms,tensors_per_s,"
        "algbw_gbps,busbw_gbps,tensors_per_response,wrong\n"
        "kolo,%d,%d,%llu,%d,%.3f,%.3f,%.1f,%.4f,%.4f,%.2f,%lld\n",
        r.ranks, kResNet50Tensors, static_cast<unsigned long long>(r.bytes), r.steps, r.median_ms,
        r.p90_ms, r.tensors_per_s, r.bw.algbw_gbps, r.bw.busbw_gbps,
        r.fusion.tensors_per_response(), static_cast<long long>(r.wrong));
    return;
  }
  std::printf("%12s %12s %12s %12s %12s %14s %8s\n", "p50(ms)", "p90(ms)", "tensors/s",
              "algbw(GB/s)", "busbw(GB/s)", "tensors/resp", "check");
  std::printf("%12.2f %12.2f %12.0f %12.3f %12.3f %14s %8s\n", r.median_ms, r.p90_ms,
              r.tensors_per_s, r.bw.algbw_gbps, r.bw.busbw_gbps,
              absl::StrFormat("%.2f (%d/%d)", r.fusion.tensors_per_response(), r.fusion.tensors,
                              r.fusion.responses)
                  .c_str(),
              check.c_str());
}

absl::Status Run(Client& client, const ClientOptions& options, const BenchConfig& config) {
  const std::vector<GradientTensor> grads = Gradients();
  KOLO_ASSIGN_OR_RETURN(GradientSet set, AllocateGradients(client, grads));
  const bool printer = client.rank() == 0;
  std::optional<JobCountersReader> reader;
  if (printer) {
    KOLO_ASSIGN_OR_RETURN(reader,
                          JobCountersReader::Connect(options.socket_path, absl::Seconds(10)));
  }

  std::vector<Handle> handles;
  handles.reserve(grads.size());
  for (int i = 0; i < config.warmup; ++i) {
    KOLO_RETURN_IF_ERROR(Step(client, set, handles, config.op));
  }
  // Counters are read with every rank between steps: no timed tensor can
  // complete before rank 0 has read and submitted.
  KOLO_RETURN_IF_ERROR(client.Barrier());
  JobCounters before;
  if (printer) {
    KOLO_ASSIGN_OR_RETURN(before, reader->Read(options.job_id));
  }

  // Per step, then (below) the maximum over ranks; the last slot carries the
  // check's wrong count.
  std::vector<float> stats;
  stats.reserve(static_cast<size_t>(config.steps) + 1);
  for (int i = 0; i < config.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    KOLO_RETURN_IF_ERROR(Step(client, set, handles, config.op));
    stats.push_back(static_cast<float>(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count()));
  }
  KOLO_RETURN_IF_ERROR(client.Barrier());
  JobCounters after;
  if (printer) {
    KOLO_ASSIGN_OR_RETURN(after, reader->Read(options.job_id));
  }

  int64_t wrong = -1;
  if (config.check) {
    KOLO_ASSIGN_OR_RETURN(wrong, CheckStep(client, set));
  }
  stats.push_back(static_cast<float>(wrong));
  TensorView stats_view{stats.data(), DType::kFloat32, {static_cast<int64_t>(stats.size())}};
  KOLO_RETURN_IF_ERROR(client.Allreduce(stats_view, stats_view, "resnet50/stats", ReduceOp::kMax));
  if (!printer) return absl::OkStatus();

  const std::vector<double> step_ms(stats.begin(), stats.end() - 1);
  Result r;
  r.ranks = client.size();
  r.steps = config.steps;
  r.bytes = static_cast<uint64_t>(TotalElements(grads)) * sizeof(float);
  r.median_ms = Median(step_ms);
  r.p90_ms = Percentile(step_ms, 0.90);
  r.tensors_per_s = grads.size() / (r.median_ms * 1e-3);
  r.bw = AllreduceBandwidth(r.bytes, r.median_ms * 1e-3, client.size());
  r.fusion = FusionBetween(before, after, static_cast<uint64_t>(config.steps) * grads.size());
  r.fusion_threshold_bytes = after.fusion_threshold_bytes;
  r.wrong = static_cast<int64_t>(stats.back());
  std::printf(
      "# kolo resnet50_grads: %d ranks, %zu tensors, %lld float32 values "
      "(%llu B) per step, %s, in place, SDK shared memory\n"
      "# steps %d, warmup %d; step time: per step the max over ranks; "
      "kolod fusion threshold %llu B\n",
      r.ranks, grads.size(), static_cast<long long>(TotalElements(grads)),
      static_cast<unsigned long long>(r.bytes), ReduceOpName(config.op), config.steps,
      config.warmup,
      static_cast<unsigned long long>(r.fusion_threshold_bytes));
  Print(r, config.csv);
  std::fflush(stdout);
  return absl::OkStatus();
}

int Fail(int rank, const absl::Status& status) {
  std::fprintf(stderr, "resnet50_grads: rank %d: %s\n", rank, status.ToString().c_str());
  return 1;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ResNet-50 gradient exchange through Kolo; run under kolorun, e.g.\n"
      "  kolorun -np 2 -- resnet50_grads [--steps=20] [--check]");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_print_shapes)) {
    std::fputs(ShapeTableText(Gradients()).c_str(), stdout);
    return 0;
  }
  absl::StatusOr<BenchConfig> config = ConfigFromFlags();
  if (!config.ok()) return Fail(-1, config.status());
  absl::StatusOr<ClientOptions> options = ClientOptions::FromEnv();
  if (!options.ok()) return Fail(-1, options.status());
  // The gradients, and room for the allocator's rounding; sparse, so cheap.
  const uint64_t need = static_cast<uint64_t>(kResNet50Parameters) * sizeof(float);
  options->arena_bytes = std::max(options->arena_bytes, 2 * need + (uint64_t{64} << 20));
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(*options);
  if (!client.ok()) return Fail(options->rank, client.status());
  absl::Status s = Run(**client, *options, *config);
  if (!s.ok()) return Fail((*client)->rank(), s);
  return 0;
}

}  // namespace
}  // namespace kolo::bench

int main(int argc, char** argv) { return kolo::bench::Main(argc, argv); }
