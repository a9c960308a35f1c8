// NcclBackend end to end on one GPU (tag "gpu"): one daemon (a single-rank
// communicator) with 1 to 3 local ranks whose tensors are plain device
// allocations of this process, handed over by a fake resolver. Results are
// checked against kernels::Reduce on the host.
#include "daemon/backend/nccl/nccl_backend.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reduce.h"

namespace kolo::daemon::nccl {
namespace {

// Resolves request_id -> in-process device pointers (no IPC).
class FakeResolver : public DeviceTensorResolver {
 public:
  absl::StatusOr<ResolvedIo> Resolve(const Request& r) override {
    auto it = io_.find(r.request_id);
    if (it == io_.end()) return absl::InvalidArgumentError("unknown request");
    return it->second;
  }
  std::map<uint64_t, ResolvedIo> io_;
};

class NcclBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  }
  // A backend whose job has `ranks` local ranks, all on GPU 0 (one NCCL
  // rank); made again when the count changes.
  void UseRanks(int ranks) {
    if (backend_ != nullptr && ranks_ == ranks) return;
    backend_.reset();
    auto id = NewNcclUniqueId();
    ASSERT_TRUE(id.ok()) << id.status();
    RankDevices placed;
    NcclBackendOptions options;
    for (int r = 0; r < ranks; ++r) {
      placed.emplace_back(r, 0);
      options.local_ranks.push_back(r);
    }
    auto comm = MakeDeviceCommPlan(ranks, {placed}, std::string(id->data(), id->size()));
    ASSERT_TRUE(comm.ok()) << comm.status();
    options.comm = *comm;
    options.initial_fusion_bytes = 1 << 20;  // forces growth below
    auto b = NcclBackend::Create(options, &resolver_);
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = std::move(*b);
    ranks_ = ranks;
  }
  void TearDown() override {
    backend_.reset();
    for (void* p : allocations_) cudaFree(p);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  uint8_t* DeviceAlloc(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes + 64), cudaSuccess);
    allocations_.push_back(p);
    return static_cast<uint8_t*>(p);
  }
  cudaEvent_t Event() {
    cudaEvent_t e = nullptr;
    EXPECT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    events_.push_back(e);
    return e;
  }

  // Runs one response of `sizes` tensors over `local` ranks and checks every
  // output against the CPU reference.
  void RunAndCheck(const std::vector<uint64_t>& sizes, int local, ReduceOp op, double prescale,
                   double postscale) {
    UseRanks(local);
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-2, 2);
    Response response;
    response.dtype = DType::kFloat32;
    response.op = op;
    response.prescale = prescale;
    response.postscale = postscale;
    // host_in[member][rank]
    std::vector<std::vector<std::vector<float>>> host_in(sizes.size());
    std::vector<std::vector<uint8_t*>> outs(sizes.size());
    uint64_t offset = 0;
    uint64_t next_id = 1;
    for (size_t m = 0; m < sizes.size(); ++m) {
      FusedMember member;
      member.set.name = "t" + std::to_string(m);
      member.set.set_size = local;
      member.offset = offset;
      for (int r = 0; r < local; ++r) {
        Request req;
        req.request_id = next_id++;
        req.rank = r;
        req.dtype = DType::kFloat32;
        req.op = op;
        req.bytes = sizes[m] * 4;
        req.name = member.set.name;
        std::vector<float> v(sizes[m]);
        for (float& x : v) x = dist(rng);
        // Inputs at a 4-byte (not 16-byte) offset: the unaligned path.
        uint8_t* in = DeviceAlloc(req.bytes) + 4;
        uint8_t* out = DeviceAlloc(req.bytes);
        EXPECT_EQ(cudaMemcpy(in, v.data(), req.bytes, cudaMemcpyHostToDevice), cudaSuccess);
        host_in[m].push_back(std::move(v));
        outs[m].push_back(out);
        ResolvedIo io;
        io.input = {in, Event()};
        io.output = {out, Event()};
        EXPECT_EQ(cudaEventRecord(io.input.event, nullptr), cudaSuccess);
        resolver_.io_[req.request_id] = io;
        member.set.requests.push_back(std::move(req));
      }
      offset += sizes[m] * 4;
      response.members.push_back(std::move(member));
    }
    response.total_bytes = offset;
    const absl::Status s = backend_->Execute(response, StepContext{});
    ASSERT_TRUE(s.ok()) << s;
    for (size_t m = 0; m < sizes.size(); ++m) {
      ASSERT_TRUE(response.members[m].status.ok()) << response.members[m].status;
      std::vector<const void*> srcs;
      for (auto& v : host_in[m]) srcs.push_back(v.data());
      std::vector<float> want(sizes[m]);
      void* dst = want.data();
      ReduceOp cpu_op = op;
      double post = postscale;
      if (op == ReduceOp::kAverage) {
        cpu_op = ReduceOp::kSum;
        post /= local;
      }
      // The backend rounds the prescaled inputs to float32 before reducing,
      // as kernels::Reduce does for float32: the results agree exactly.
      ASSERT_TRUE(kernels::Reduce(DType::kFloat32, cpu_op, srcs, absl::MakeSpan(&dst, 1), sizes[m],
                                  prescale, post)
                      .ok());
      for (int r = 0; r < local; ++r) {
        std::vector<float> got(sizes[m]);
        ASSERT_EQ(cudaMemcpy(got.data(), outs[m][r], sizes[m] * 4, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        for (size_t i = 0; i < sizes[m]; ++i) {
          ASSERT_EQ(got[i], want[i]) << "tensor " << m << " rank " << r << " element " << i;
        }
      }
    }
  }

  FakeResolver resolver_;
  std::unique_ptr<NcclBackend> backend_;
  int ranks_ = 0;
  std::vector<void*> allocations_;
  std::vector<cudaEvent_t> events_;
};

TEST_F(NcclBackendTest, OneRankCopiesWithScales) {
  RunAndCheck({1, 1000, 77777}, 1, ReduceOp::kSum, 2.0, 0.5);
}

// One tensor, one rank on the GPU, no prescale: the direct path (no fusion
// buffer), with and without a postscale, for a float and an integer type.
TEST_F(NcclBackendTest, OneTensorOfOneRankTakesTheDirectPath) {
  RunAndCheck({77777}, 1, ReduceOp::kSum, 1.0, 0.5);
  RunAndCheck({1 << 20}, 1, ReduceOp::kMax, 1.0, 1.0);
  RunAndCheck({4096}, 1, ReduceOp::kAverage, 1.0, 1.0);
}

TEST_F(NcclBackendTest, ThreeLocalRanksSumAverageAndMax) {
  RunAndCheck({3, 4096, 100001}, 3, ReduceOp::kSum, 1.0, 1.0);
  RunAndCheck({513, 9}, 3, ReduceOp::kAverage, 1.0, 1.0);
  RunAndCheck({1 << 20}, 2, ReduceOp::kMax, 1.0, 1.0);
}

TEST_F(NcclBackendTest, GrowsTheFusionBufferForALargeResponse) {
  RunAndCheck({3 << 20}, 2, ReduceOp::kSum, 1.0, 1.0);  // 24 MiB over a 1 MiB buffer
}

TEST_F(NcclBackendTest, AMemberThatFailsToResolveFailsAlone) {
  UseRanks(1);
  Response response;
  response.dtype = DType::kFloat32;
  FusedMember m;
  m.set.name = "missing";
  m.set.set_size = 1;
  Request r;
  r.request_id = 999;  // unknown to the resolver
  r.rank = 0;
  r.bytes = 64;
  m.set.requests.push_back(r);
  response.members.push_back(m);
  response.total_bytes = 64;
  EXPECT_TRUE(backend_->Execute(response, StepContext{}).ok());
  EXPECT_EQ(response.members[0].status.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(NcclBackendTest, BroadcastsFromTheRootToEveryLocalRank) {
  UseRanks(3);
  Response response;
  response.kind = CollectiveKind::kBroadcast;
  response.dtype = DType::kInt32;
  response.root_rank = 1;
  std::vector<std::vector<int32_t>> want(2);
  std::vector<std::vector<uint8_t*>> outs(2);
  uint64_t next_id = 1, offset = 0;
  for (int m = 0; m < 2; ++m) {
    FusedMember member;
    member.set.name = "b" + std::to_string(m);
    member.set.set_size = 3;
    member.offset = offset;
    const size_t n = m == 0 ? 5 : 70001;
    for (int r = 0; r < 3; ++r) {
      Request req;
      req.request_id = next_id++;
      req.rank = r;
      req.kind = CollectiveKind::kBroadcast;
      req.dtype = DType::kInt32;
      req.root_rank = 1;
      req.bytes = n * 4;
      std::vector<int32_t> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i * 7 + r * 1000003 + m);
      if (r == 1) want[m] = v;
      uint8_t* buf = DeviceAlloc(req.bytes);  // in place, as the SDK submits it
      EXPECT_EQ(cudaMemcpy(buf, v.data(), req.bytes, cudaMemcpyHostToDevice), cudaSuccess);
      outs[m].push_back(buf);
      ResolvedIo io;
      io.input = {buf, Event()};
      io.output = {buf, Event()};
      EXPECT_EQ(cudaEventRecord(io.input.event, nullptr), cudaSuccess);
      resolver_.io_[req.request_id] = io;
      member.set.requests.push_back(std::move(req));
    }
    offset += n * 4;
    response.members.push_back(std::move(member));
  }
  response.total_bytes = offset;
  const absl::Status s = backend_->Execute(response, StepContext{});
  ASSERT_TRUE(s.ok()) << s;
  for (int m = 0; m < 2; ++m) {
    ASSERT_TRUE(response.members[m].status.ok()) << response.members[m].status;
    for (int r = 0; r < 3; ++r) {
      std::vector<int32_t> got(want[m].size());
      ASSERT_EQ(cudaMemcpy(got.data(), outs[m][r], got.size() * 4, cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_EQ(got, want[m]) << "member " << m << " rank " << r;
    }
  }
}

TEST_F(NcclBackendTest, ARankOnAnotherGpuThanItsOwnFailsAlone) {
  UseRanks(1);
  Response response;
  response.dtype = DType::kFloat32;
  FusedMember m;
  m.set.name = "moved";
  m.set.set_size = 1;
  Request r;
  r.request_id = 1000;
  r.rank = 0;
  r.bytes = 64;
  r.device = cuda::DeviceIo{};
  r.device->input.device = 5;  // rank 0 lives on GPU 0 in this job
  m.set.requests.push_back(r);
  response.members.push_back(m);
  response.total_bytes = 64;
  EXPECT_TRUE(backend_->Execute(response, StepContext{}).ok());
  EXPECT_EQ(response.members[0].status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(response.members[0].status.message().find("its GPU in this job is device 0"),
            std::string::npos)
      << response.members[0].status;
}

TEST_F(NcclBackendTest, OtherCollectivesAreUnimplemented) {
  UseRanks(1);
  Response response;
  response.kind = CollectiveKind::kAllgather;
  EXPECT_EQ(backend_->Execute(response, StepContext{}).code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kolo::daemon::nccl
