// Device allreduce through a real kolod: two ranks (two Clients in this
// process, one thread each) on GPU 0 submit device tensors (CUDA IPC) with
// their own producer streams; the results are checked on the host. Needs a
// GPU (tag "gpu").
#include <cuda_runtime_api.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kolo/kolo.h"
#include "tests/integration/harness.h"

namespace kolo::testing {
namespace {

constexpr int kRanks = 2;

class DeviceAllreduceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
    dir_ = MakeTempDir();
    auto d = DaemonProcess::Start(dir_ + "/kolod.sock");
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_.emplace(std::move(*d));
  }

  std::string dir_;
  std::optional<DaemonProcess> daemon_;
};

// Rank r's tensor: element i is r + 1 + i / 1024 (exact in float32).
float Value(int rank, int64_t i) { return static_cast<float>(rank + 1) + (i % 1024) / 1024.0f; }

void RunRank(const std::string& socket, int rank, const std::vector<int64_t>& sizes,
             absl::Status* result) {
  ClientOptions options;
  options.socket_path = socket;
  options.job_id = "gpu-job";
  options.job_token = kTestJobToken;
  options.rank = rank;
  options.size = kRanks;
  options.local_rank = rank;
  options.local_size = kRanks;
  auto client = Client::Connect(options);
  if (!client.ok()) {
    *result = client.status();
    return;
  }
  if (cudaSetDevice(0) != cudaSuccess) {
    *result = absl::InternalError("cudaSetDevice(0)");
    return;
  }
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  for (int64_t n : sizes) {
    std::vector<float> host(n);
    for (int64_t i = 0; i < n; ++i) host[i] = Value(rank, i);
    void* in = nullptr;
    void* out = nullptr;
    if (cudaMalloc(&in, n * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&out, n * sizeof(float)) != cudaSuccess) {
      *result = absl::ResourceExhaustedError("cudaMalloc");
      return;
    }
    // Produced on the stream, not synchronised: the SDK's ready event orders
    // it.
    cudaMemcpyAsync(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream);
    cudaMemsetAsync(out, 0, n * sizeof(float), stream);
    ConstTensorView input(in, DType::kFloat32, {n}, /*dev=*/0);
    TensorView output{out, DType::kFloat32, {n}, /*device=*/0};
    AllreduceOptions ar;
    ar.op = ReduceOp::kSum;
    ar.cuda_stream = stream;
    absl::Status s = (*client)->Allreduce(input, output, "grad/" + std::to_string(n), ar);
    if (!s.ok()) {
      *result = s;
      return;
    }
    // The stream waits on kolod's done event: this copy sees the result.
    std::vector<float> got(n);
    cudaMemcpyAsync(got.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    for (int64_t i = 0; i < n; ++i) {
      float want = Value(0, i) + Value(1, i);
      if (std::fabs(got[i] - want) > 1e-5f) {
        *result = absl::InternalError("rank " + std::to_string(rank) + ": element " +
                                      std::to_string(i) + " of " + std::to_string(n) + " is " +
                                      std::to_string(got[i]) + ", want " + std::to_string(want));
        return;
      }
    }
    cudaFree(in);
    cudaFree(out);
  }
  // Broadcast in place from rank 1: every rank ends with rank 1's tensor.
  for (int64_t n : sizes) {
    std::vector<int32_t> host(n);
    for (int64_t i = 0; i < n; ++i) host[i] = static_cast<int32_t>(rank * 1000003 + i);
    void* buf = nullptr;
    if (cudaMalloc(&buf, n * sizeof(int32_t)) != cudaSuccess) {
      *result = absl::ResourceExhaustedError("cudaMalloc");
      return;
    }
    cudaMemcpyAsync(buf, host.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice, stream);
    CollectiveOptions bo;
    bo.cuda_stream = stream;
    absl::Status s = (*client)->Broadcast(TensorView{buf, DType::kInt32, {n}, /*device=*/0},
                                          "weights/" + std::to_string(n), /*root_rank=*/1, bo);
    if (!s.ok()) {
      *result = s;
      return;
    }
    std::vector<int32_t> got(n);
    cudaMemcpyAsync(got.data(), buf, n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    for (int64_t i = 0; i < n; ++i) {
      if (got[i] != static_cast<int32_t>(1000003 + i)) {
        *result = absl::InternalError("rank " + std::to_string(rank) + ": broadcast element " +
                                      std::to_string(i) + " of " + std::to_string(n) + " is " +
                                      std::to_string(got[i]));
        return;
      }
    }
    cudaFree(buf);
  }
  cudaStreamDestroy(stream);
  *result = absl::OkStatus();
}

TEST_F(DeviceAllreduceTest, TwoRanksOnOneGpuSumAndBroadcastDeviceTensors) {
  const std::vector<int64_t> sizes = {1, 1000, 1 << 20};
  absl::Status results[kRanks];
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back(RunRank, daemon_->socket_path(), r, sizes, &results[r]);
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  EXPECT_TRUE(daemon_->Alive());
}

}  // namespace
}  // namespace kolo::testing
