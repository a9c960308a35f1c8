// Ring allreduce over UcxTransports joined by loopback tcp in one process
// (one thread per node): prints time and bandwidth per size as a table.
//
//   ucx_allreduce_bench [nodes ...]     (default: 2 3)
//
// KOLO_BENCH_CHUNK_KIB sets the ring's chunk size (default: the library's),
// KOLO_BENCH_SPIN_PASSES the transport's spin passes (UcxOptions), and
// KOLO_BENCH_ALGO=rd runs recursive doubling instead of the ring.
//
// busbw = algbw * 2(n-1)/n, the bytes each node's link carries per second,
// comparable across node counts. On one machine every "node" shares the same
// cores and memory, so the figures bound the code path, not a network.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "daemon/algorithms/allreduce.h"
#include "daemon/transport/ucx_loopback_cluster.h"

namespace kolo::daemon {
namespace {

size_t ChunkBytes() {
  const char* kib = std::getenv("KOLO_BENCH_CHUNK_KIB");
  return kib != nullptr && std::atoi(kib) > 0 ? static_cast<size_t>(std::atoi(kib)) << 10
                                              : kDefaultChunkBytes;
}

int RunBench(int n) {
  UcxOptions options;
  if (const char* spin = std::getenv("KOLO_BENCH_SPIN_PASSES"); spin != nullptr) {
    options.spin_passes = std::atoi(spin);
  }
  absl::StatusOr<UcxLoopbackCluster> cluster = UcxLoopbackCluster::Create(n, options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "cluster of %d: %s\n", n, cluster.status().ToString().c_str());
    return 1;
  }
  const char* algo = std::getenv("KOLO_BENCH_ALGO");
  const bool rd = algo != nullptr && std::string(algo) == "rd";
  const size_t chunk = ChunkBytes();
  uint64_t tag = 1;
  for (size_t kib : {256, 1024, 4096, 16384, 65536}) {
    const size_t bytes = kib << 10, count = bytes / sizeof(float);
    std::vector<std::vector<float>> bufs(n, std::vector<float>(count, 1.0f));
    const int iters = kib <= 1024 ? 20 : (kib <= 16384 ? 5 : 3);
    std::vector<double> seconds;
    for (int it = -1; it < iters; ++it) {  // iteration -1 warms up
      absl::Status failed;
      const absl::Time start = absl::Now();
      std::vector<std::thread> threads;
      std::vector<absl::Status> results(n);
      for (int i = 0; i < n; ++i) {
        threads.emplace_back([&, i] {
          results[i] =
              rd ? RecursiveDoublingAllreduce(cluster->node(i), bufs[i].data(), count,
                                              DType::kFloat32, ReduceOp::kSum, tag << 24,
                                              start + absl::Seconds(120), chunk)
                 : RingAllreduce(cluster->node(i), bufs[i].data(), count, DType::kFloat32,
                                 ReduceOp::kSum, tag << 24, start + absl::Seconds(120), chunk);
        });
      }
      for (auto& t : threads) t.join();
      ++tag;
      for (const absl::Status& s : results) {
        if (!s.ok()) {
          std::fprintf(stderr, "allreduce: %s\n", s.ToString().c_str());
          return 1;
        }
      }
      if (it >= 0) seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
    std::sort(seconds.begin(), seconds.end());
    const double t = seconds[seconds.size() / 2];
    const double algbw = bytes / t / 1e9;
    const double busbw = algbw * 2.0 * (n - 1) / n;
    std::printf("%6d %10zu %12.1f %10.3f %10.3f\n", n, bytes, t * 1e6, algbw, busbw);
  }
  return 0;
}

}  // namespace
}  // namespace kolo::daemon

int main(int argc, char** argv) {
  std::vector<int> node_counts;
  for (int i = 1; i < argc; ++i) node_counts.push_back(std::atoi(argv[i]));
  if (node_counts.empty()) node_counts = {2, 3};
  std::printf("%6s %10s %12s %10s %10s\n", "nodes", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s");
  for (int n : node_counts) {
    if (n < 2 || kolo::daemon::RunBench(n) != 0) return 1;
  }
  return 0;
}
