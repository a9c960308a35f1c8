// device_allreduce_perf: allreduce of device tensors through kolod, in the
// allreduce_perf table format, to set beside pack_bench's direct
// ncclAllReduce figures.
//
//   device_allreduce_perf --socket=PATH [--ranks=2] [--min_bytes=4]
//       [--max_bytes=268435456] [--iters=20] [--warmup=5] [--csv]
//
// Runs `ranks` ranks of one job as threads of this process, all on GPU 0
// (the single-node case kolod's NCCL backend serves: the ranks'
// contributions are reduced on the device). Each rank produces its tensor on
// its own stream and passes the stream (AllreduceOptions::cuda_stream); the
// time of one allreduce is from submission to the moment the stream has
// passed kolod's done event (Allreduce then cudaStreamSynchronize), the
// median over `iters`, maximum over ranks. Each size is checked once on the
// host (`wrong`: elements that differ).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/random_id.h"
#include "examples/bench/perf_stats.h"
#include "kolo/kolo.h"

ABSL_FLAG(std::string, socket, "/run/kolo/kolod.sock", "kolod's socket.");
ABSL_FLAG(int, ranks, 2, "Ranks (threads), all on GPU 0.");
ABSL_FLAG(uint64_t, min_bytes, 4, "Smallest message size in bytes.");
ABSL_FLAG(uint64_t, max_bytes, uint64_t{256} << 20, "Largest message size in bytes.");
ABSL_FLAG(int, iters, 20, "Timed allreduces per size.");
ABSL_FLAG(int, warmup, 5, "Untimed allreduces per size before timing.");
ABSL_FLAG(bool, csv, false, "Print CSV rows instead of a table.");
ABSL_FLAG(bool, out_of_place, false,
          "Reduce into a second buffer instead of in place (one rank: the same work as a "
          "single-rank ncclAllReduce, a copy).");

namespace kolo::bench {
namespace {

struct Shared {
  absl::Mutex mu;
  // Per size: the maximum over ranks of the median time and of wrong counts.
  std::vector<double> time_us;
  std::vector<double> call_us;  // until Allreduce() returned (kolod's completion)
  std::vector<int64_t> wrong;
  absl::Status error;
  std::string job_token;  // one random token for every rank of the job
};

absl::Status Cuda(cudaError_t e, const char* what) {
  return e == cudaSuccess ? absl::OkStatus()
                          : absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

absl::Status RunRank(int rank, int ranks, const std::vector<uint64_t>& sizes, Shared* shared) {
  ClientOptions options;
  options.socket_path = absl::GetFlag(FLAGS_socket);
  options.job_id = "device-allreduce-perf";
  options.job_token = shared->job_token;
  options.rank = rank;
  options.size = ranks;
  options.local_rank = rank;
  options.local_size = ranks;
  auto client = Client::Connect(options);
  if (!client.ok()) return client.status();
  if (absl::Status s = Cuda(cudaSetDevice(0), "cudaSetDevice"); !s.ok()) return s;
  cudaStream_t stream;
  if (absl::Status s = Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
      !s.ok()) {
    return s;
  }
  const uint64_t max_count = sizes.back() / sizeof(float);
  void* buf = nullptr;
  if (absl::Status s = Cuda(cudaMalloc(&buf, max_count * sizeof(float)), "cudaMalloc"); !s.ok()) {
    return s;
  }
  const bool out_of_place = absl::GetFlag(FLAGS_out_of_place);
  void* out = buf;
  if (out_of_place) {
    if (absl::Status s = Cuda(cudaMalloc(&out, max_count * sizeof(float)), "cudaMalloc"); !s.ok()) {
      return s;
    }
  }
  std::vector<float> host(max_count);
  for (size_t k = 0; k < sizes.size(); ++k) {
    const uint64_t count = sizes[k] / sizeof(float);
    const std::string name = absl::StrCat("perf/", sizes[k]);
    TensorView view{buf, DType::kFloat32, {static_cast<int64_t>(count)}, /*device=*/0};
    TensorView result{out, DType::kFloat32, {static_cast<int64_t>(count)}, /*device=*/0};
    AllreduceOptions ar;
    ar.cuda_stream = stream;
    FillInput(ReduceOp::kSum, rank, host.data(), count);
    cudaMemcpyAsync(buf, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream);
    std::vector<double> times;
    std::vector<double> calls;
    for (int i = 0; i < absl::GetFlag(FLAGS_warmup) + absl::GetFlag(FLAGS_iters); ++i) {
      const auto start = std::chrono::steady_clock::now();
      if (absl::Status s = (*client)->Allreduce(view, result, name, ar); !s.ok()) return s;
      const auto returned = std::chrono::steady_clock::now();
      cudaStreamSynchronize(stream);
      if (i >= absl::GetFlag(FLAGS_warmup)) {
        calls.push_back(std::chrono::duration<double, std::micro>(returned - start).count());
        times.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count());
      }
    }
    // One more on fresh data, checked on the host.
    FillInput(ReduceOp::kSum, rank, host.data(), count);
    cudaMemcpyAsync(buf, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream);
    if (absl::Status s = (*client)->Allreduce(view, result, name, ar); !s.ok()) return s;
    cudaMemcpyAsync(host.data(), out, count * sizeof(float), cudaMemcpyDeviceToHost, stream);
    if (absl::Status s = Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); !s.ok()) {
      return s;
    }
    const int64_t wrong =
        static_cast<int64_t>(CountMismatches(ReduceOp::kSum, ranks, host.data(), count));
    absl::MutexLock l(&shared->mu);
    shared->time_us[k] = std::max(shared->time_us[k], Median(times));
    shared->call_us[k] = std::max(shared->call_us[k], Median(calls));
    shared->wrong[k] = std::max(shared->wrong[k], wrong);
  }
  cudaFree(buf);
  if (out_of_place) cudaFree(out);
  cudaStreamDestroy(stream);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int ranks = absl::GetFlag(FLAGS_ranks);
  const bool csv = absl::GetFlag(FLAGS_csv);
  const std::vector<uint64_t> sizes =
      SweepSizes(absl::GetFlag(FLAGS_min_bytes), absl::GetFlag(FLAGS_max_bytes), sizeof(float));
  Shared shared;
  shared.job_token = RandomHex(16);
  shared.time_us.assign(sizes.size(), 0.0);
  shared.call_us.assign(sizes.size(), 0.0);
  shared.wrong.assign(sizes.size(), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      absl::Status s = RunRank(r, ranks, sizes, &shared);
      if (!s.ok()) {
        absl::MutexLock l(&shared.mu);
        if (shared.error.ok())
          shared.error = absl::Status(s.code(), absl::StrCat("rank ", r, ": ", s.message()));
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!shared.error.ok()) {
    std::printf("FAIL device_allreduce_perf: %s\n", shared.error.ToString().c_str());
    return 1;
  }
  std::printf(
      "# kolo device allreduce through kolod: %d ranks on GPU 0, "
      "float32 sum, %s\n"
      "# time: submit to stream past kolod's done event; max over "
      "ranks of the median\n%s",
      ranks, absl::GetFlag(FLAGS_out_of_place) ? "out of place" : "in place",
      SweepHeader(csv).c_str());
  bool ok = true;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const SweepRow row{.bytes = sizes[k],
                       .count = sizes[k] / sizeof(float),
                       .time_us = shared.time_us[k],
                       .bw = AllreduceBandwidth(sizes[k], shared.time_us[k] * 1e-6, ranks),
                       .wrong = shared.wrong[k]};
    std::fputs(SweepLine(row, csv).c_str(), stdout);
    ok = ok && shared.wrong[k] == 0;
  }
  // Where the time goes: until the SDK's call returned (kolod saw the GPU
  // work complete and wrote the completion), and the rest (the stream's wait
  // on kolod's done event and the synchronize).
  if (!csv) {
    std::printf("# %12s %14s %14s\n", "size(B)", "call_us", "stream_us");
    for (size_t k = 0; k < sizes.size(); ++k) {
      std::printf("# %12llu %14.1f %14.1f\n", static_cast<unsigned long long>(sizes[k]),
                  shared.call_us[k], shared.time_us[k] - shared.call_us[k]);
    }
  }
  std::printf("%s device allreduce results checked on the host\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace kolo::bench

int main(int argc, char** argv) { return kolo::bench::Main(argc, argv); }
