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

// Rank `rank` of job `job`, both ranks on this node.
ClientOptions RankOptions(const std::string& socket, const std::string& job, int rank) {
  ClientOptions options;
  options.socket_path = socket;
  options.job_id = job;
  options.job_token = kTestJobToken;
  options.rank = rank;
  options.size = kRanks;
  options.local_rank = rank;
  options.local_size = kRanks;
  return options;
}

void RunRank(const std::string& socket, int rank, const std::vector<int64_t>& sizes,
             absl::Status* result) {
  auto client = Client::Connect(RankOptions(socket, "gpu-job", rank));
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

// Rank r allgathers r + 2 rows of [.., 3] int32 (the output sized by the
// caller, as the SDK's users do after exchanging row counts), then
// reducescatters [5, 4] float32 (rank 0 gets 3 rows, rank 1 gets 2).
void GatherAndScatter(const std::string& socket, int rank, absl::Status* result) {
  auto client = Client::Connect(RankOptions(socket, "gpu-gather-job", rank));
  if (!client.ok() || cudaSetDevice(0) != cudaSuccess) {
    *result = client.ok() ? absl::InternalError("cudaSetDevice") : client.status();
    return;
  }
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  auto fail = [&](const std::string& why) {
    *result = absl::InternalError("rank " + std::to_string(rank) + ": " + why);
  };
  // Allgather.
  const int64_t my_rows = rank + 2, total_rows = 2 + 3;
  std::vector<int32_t> mine(my_rows * 3);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = rank * 100 + static_cast<int32_t>(i);
  void *in = nullptr, *out = nullptr;
  cudaMalloc(&in, mine.size() * 4);
  cudaMalloc(&out, total_rows * 3 * 4);
  cudaMemcpyAsync(in, mine.data(), mine.size() * 4, cudaMemcpyHostToDevice, stream);
  CollectiveOptions co;
  co.cuda_stream = stream;
  auto h =
      (*client)->AllgatherAsync(ConstTensorView(in, DType::kInt32, {my_rows, 3}, 0),
                                TensorView{out, DType::kInt32, {total_rows, 3}, 0}, "gather", co);
  absl::Status s = h.ok() ? (*client)->Wait(*h) : h.status();
  if (!s.ok()) return fail(s.ToString());
  std::vector<int32_t> got(total_rows * 3);
  cudaMemcpyAsync(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  size_t at = 0;
  for (int r = 0; r < kRanks; ++r) {
    for (int64_t i = 0; i < (r + 2) * 3; ++i, ++at) {
      if (got[at] != r * 100 + i) return fail("allgather element " + std::to_string(at));
    }
  }
  // Reducescatter (average).
  const int64_t rows = 5, cols = 4, share = rank == 0 ? 3 : 2, first = rank == 0 ? 0 : 3;
  std::vector<float> full(rows * cols);
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(rank + 1) * i;
  void *fin = nullptr, *fout = nullptr;
  cudaMalloc(&fin, full.size() * 4);
  cudaMalloc(&fout, share * cols * 4);
  cudaMemcpyAsync(fin, full.data(), full.size() * 4, cudaMemcpyHostToDevice, stream);
  AllreduceOptions ao;
  ao.op = ReduceOp::kAverage;
  ao.cuda_stream = stream;
  h = (*client)->ReducescatterAsync(ConstTensorView(fin, DType::kFloat32, {rows, cols}, 0),
                                    TensorView{fout, DType::kFloat32, {share, cols}, 0}, "scatter",
                                    ao);
  s = h.ok() ? (*client)->Wait(*h) : h.status();
  if (!s.ok()) return fail(s.ToString());
  std::vector<float> part(share * cols);
  cudaMemcpyAsync(part.data(), fout, part.size() * 4, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  for (int64_t i = 0; i < share * cols; ++i) {
    const float want = 1.5f * static_cast<float>(first * cols + i);  // (1 + 2) / 2
    if (std::fabs(part[i] - want) > 1e-4f)
      return fail("reducescatter element " + std::to_string(i));
  }
  cudaFree(in);
  cudaFree(out);
  cudaFree(fin);
  cudaFree(fout);
  cudaStreamDestroy(stream);
  *result = absl::OkStatus();
}

TEST_F(DeviceAllreduceTest, TwoRanksAllgatherAndReducescatterDeviceTensors) {
  absl::Status results[kRanks];
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back(GatherAndScatter, daemon_->socket_path(), r, &results[r]);
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  EXPECT_TRUE(daemon_->Alive());
}

}  // namespace
}  // namespace kolo::testing
