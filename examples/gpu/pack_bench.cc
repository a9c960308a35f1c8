// pack_bench: device bandwidth of Kolo's pack/unpack kernels against
// cudaMemcpy device-to-device in the same run, and a direct ncclAllReduce
// sweep on one GPU (a single-rank communicator) as the peer figure.
//
// Prints tables (size, time, algbw, busbw, ratio to the peer) and one
// PASS/FAIL line per check; exits non-zero if a check fails or CUDA/NCCL
// reports an error. Not a test: run it by hand or from device_check.sh.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_status.h"
#include "daemon/backend/nccl/nccl_status.h"
#include "kernels/cuda/batched_copy.h"

namespace {

using kolo::cuda::CudaLaunchStatus;
using kolo::cuda::CudaStatus;
using kolo::daemon::nccl::NcclStatus;
namespace kc = kolo::kernels::cuda;

// Pack and unpack must reach this fraction of cudaMemcpy's bandwidth on
// large fused buffers with the backend's (16-byte aligned) layout.
constexpr double kMinRatio = 0.85;

#define CHECK_OK(expr)                                                         \
  do {                                                                         \
    const absl::Status s_ = (expr);                                            \
    if (!s_.ok()) {                                                            \
      std::printf("FAIL pack_bench: %s\n", std::string(s_.message()).c_str()); \
      std::exit(2);                                                            \
    }                                                                          \
  } while (0)

struct Timer {
  cudaEvent_t start, stop;
  Timer() {
    CHECK_OK(CudaStatus(cudaEventCreate(&start), "cudaEventCreate"));
    CHECK_OK(CudaStatus(cudaEventCreate(&stop), "cudaEventCreate"));
  }
  ~Timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  // Average milliseconds of `iters` runs of `fn` on `s` after `warmup`.
  template <class F>
  double Time(cudaStream_t s, int warmup, int iters, F fn) {
    for (int i = 0; i < warmup; ++i) fn();
    CHECK_OK(CudaStatus(cudaEventRecord(start, s), "cudaEventRecord"));
    for (int i = 0; i < iters; ++i) fn();
    CHECK_OK(CudaStatus(cudaEventRecord(stop, s), "cudaEventRecord"));
    CHECK_OK(CudaStatus(cudaEventSynchronize(stop), "cudaEventSynchronize"));
    float ms = 0;
    CHECK_OK(CudaStatus(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime"));
    return ms / iters;
  }
};

double GBps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }

std::string Size(uint64_t b) {
  if (b >= (1ull << 30)) return absl::StrCat(b >> 30, " GiB");
  if (b >= (1ull << 20)) return absl::StrCat(b >> 20, " MiB");
  return absl::StrCat(b >> 10, " KiB");
}

}  // namespace

int main() {
  int devices = 0;
  CHECK_OK(CudaStatus(cudaGetDeviceCount(&devices), "cudaGetDeviceCount"));
  if (devices == 0) {
    std::printf("FAIL pack_bench: no CUDA device\n");
    return 2;
  }
  CHECK_OK(CudaStatus(cudaSetDevice(0), "cudaSetDevice"));
  cudaDeviceProp prop;
  CHECK_OK(CudaStatus(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"));
  std::printf("device 0: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  cudaStream_t s;
  CHECK_OK(CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream"));
  Timer timer;
  bool ok = true;

  const uint64_t kMax = 1ull << 30;
  uint8_t *a = nullptr, *b = nullptr;
  CHECK_OK(CudaStatus(cudaMalloc(&a, kMax + (1 << 20)), "cudaMalloc"));
  CHECK_OK(CudaStatus(cudaMalloc(&b, kMax + (1 << 20)), "cudaMalloc"));
  CHECK_OK(CudaStatus(cudaMemset(a, 1, kMax + (1 << 20)), "cudaMemset"));
  kc::CopySegment* desc = nullptr;
  const int kTensors = 97;  // odd sizes: a fused response of many gradients
  CHECK_OK(CudaStatus(cudaMalloc(&desc, 2 * kTensors * sizeof(kc::CopySegment)), "cudaMalloc"));

  std::printf("\n%-10s %10s %12s %12s %12s %12s %8s %8s\n", "size", "memcpy_us", "memcpy_GB/s",
              "pack_GB/s", "unpack_GB/s", "dense_GB/s", "pack/cp", "unp/cp");
  for (uint64_t total = 1 << 20; total <= kMax; total *= 4) {
    const int iters = total >= (64 << 20) ? 20 : 100;
    const double cp_ms = timer.Time(s, 3, iters, [&] {
      CHECK_OK(CudaStatus(cudaMemcpyAsync(b, a, total, cudaMemcpyDeviceToDevice, s), "memcpy"));
    });
    // Tensors of float32 with odd element counts summing to about `total`:
    // inputs at 256-byte-aligned places in `a` (as allocators give), fused
    // at 16-byte-aligned offsets (the backend's layout) or densely.
    auto plan = [&](bool aligned, std::vector<kc::CopySegment>* pack,
                    std::vector<kc::CopySegment>* unpack) {
      pack->clear();
      unpack->clear();
      uint64_t in = 0, fused = 0;
      const uint64_t per = total / 4 / kTensors;
      for (int t = 0; t < kTensors; ++t) {
        const uint64_t count = (per | 1) - (t % 3) * 2;
        if (aligned) fused = (fused + 15) / 16 * 16;
        pack->push_back(
            {reinterpret_cast<uint64_t>(a + in), reinterpret_cast<uint64_t>(b + fused), count, 0});
        unpack->push_back(
            {reinterpret_cast<uint64_t>(b + fused), reinterpret_cast<uint64_t>(a + in), count, 0});
        in = (in + count * 4 + 255) / 256 * 256;
        fused += count * 4;
      }
      return fused;
    };
    double pack_ms = 0, unpack_ms = 0, dense_ms = 0;
    uint64_t moved = 0;
    for (int mode = 0; mode < 2; ++mode) {
      std::vector<kc::CopySegment> pack, unpack;
      moved = plan(mode == 0, &pack, &unpack);
      const uint64_t pack_chunks =
          kc::AssignCopyChunks(kolo::DType::kFloat32, pack.data(), pack.size());
      const uint64_t unpack_chunks =
          kc::AssignCopyChunks(kolo::DType::kFloat32, unpack.data(), unpack.size());
      CHECK_OK(CudaStatus(
          cudaMemcpy(desc, pack.data(), kTensors * sizeof(kc::CopySegment), cudaMemcpyHostToDevice),
          "descriptor upload"));
      CHECK_OK(CudaStatus(cudaMemcpy(desc + kTensors, unpack.data(),
                                     kTensors * sizeof(kc::CopySegment), cudaMemcpyHostToDevice),
                          "descriptor upload"));
      const double p = timer.Time(s, 3, iters, [&] {
        CHECK_OK(CudaLaunchStatus(
            kc::BatchedCopyAsync(kolo::DType::kFloat32, desc, kTensors, pack_chunks, 0.5, s),
            "pack"));
      });
      if (mode == 0) {
        pack_ms = p;
        unpack_ms = timer.Time(s, 3, iters, [&] {
          CHECK_OK(CudaLaunchStatus(kc::BatchedCopyAsync(kolo::DType::kFloat32, desc + kTensors,
                                                         kTensors, unpack_chunks, 2.0, s),
                                    "unpack"));
        });
      } else {
        dense_ms = p;
      }
    }
    const double cp = GBps(static_cast<double>(total), cp_ms);
    const double pk = GBps(static_cast<double>(moved), pack_ms);
    const double up = GBps(static_cast<double>(moved), unpack_ms);
    const double dn = GBps(static_cast<double>(moved), dense_ms);
    std::printf("%-10s %10.1f %12.1f %12.1f %12.1f %12.1f %8.2f %8.2f\n", Size(total).c_str(),
                cp_ms * 1e3, cp, pk, up, dn, pk / cp, up / cp);
    if (total >= (64ull << 20) && (pk / cp < kMinRatio || up / cp < kMinRatio)) ok = false;
  }
  std::printf("%s pack/unpack bandwidth >= %.0f%% of cudaMemcpy D2D at >= 64 MiB\n",
              ok ? "PASS" : "FAIL", kMinRatio * 100);

  // The peer figure: NCCL on one rank (its allreduce is a device copy).
  ncclUniqueId id;
  CHECK_OK(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  ncclComm_t comm = nullptr;
  CHECK_OK(NcclStatus(ncclCommInitRank(&comm, 1, id, 0), "ncclCommInitRank"));
  std::printf("\n%-10s %10s %12s %12s %12s\n", "size", "nccl_us", "algbw_GB/s", "busbw_GB/s",
              "vs_memcpy");
  for (uint64_t total = 1 << 20; total <= kMax; total *= 4) {
    const int iters = total >= (64 << 20) ? 20 : 100;
    const size_t count = total / 4;
    const double ms = timer.Time(s, 3, iters, [&] {
      CHECK_OK(NcclStatus(ncclAllReduce(a, b, count, ncclFloat32, ncclSum, comm, s),
                          "ncclAllReduce", comm));
    });
    const double cp_ms = timer.Time(s, 1, iters, [&] {
      CHECK_OK(CudaStatus(cudaMemcpyAsync(b, a, total, cudaMemcpyDeviceToDevice, s), "memcpy"));
    });
    // busbw = algbw * 2(n-1)/n, which is 0 on one rank: shown for the table's
    // shape; the useful figure is algbw against memcpy.
    const double algbw = GBps(static_cast<double>(total), ms);
    std::printf("%-10s %10.1f %12.1f %12.1f %12.2f\n", Size(total).c_str(), ms * 1e3, algbw, 0.0,
                ms > 0 ? cp_ms / ms : 0.0);
  }
  CHECK_OK(NcclStatus(ncclCommDestroy(comm), "ncclCommDestroy"));
  std::printf("PASS nccl single-rank allreduce sweep ran\n");
  CHECK_OK(CudaStatus(cudaGetLastError(), "final check"));
  cudaFree(desc);
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(s);
  return ok ? 0 : 1;
}
