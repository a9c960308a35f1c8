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
        io.input = {in, req.bytes, Event()};
        io.output = {out, req.bytes, Event()};
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
      io.input = {buf, req.bytes, Event()};
      io.output = {buf, req.bytes, Event()};
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

// Allgather of int32 rows [rows_r, 3] from `ranks` local ranks on one GPU
// (rank r sends rows[r] rows), two members fused; checked on the host.
TEST_F(NcclBackendTest, AllgathersRanksOfDifferentRowCounts) {
  for (int ranks : {1, 3}) {
    UseRanks(ranks);
    const std::vector<int64_t> rows = {2, 0, 5};
    Response response;
    response.kind = CollectiveKind::kAllgather;
    response.dtype = DType::kInt32;
    std::vector<std::vector<int32_t>> want(2);
    std::vector<std::vector<uint8_t*>> outs(2);
    uint64_t next_id = 1;
    for (int m = 0; m < 2; ++m) {
      FusedMember member;
      member.set.name = "g" + std::to_string(m);
      member.set.set_size = ranks;
      int64_t total_rows = 0;
      for (int r = 0; r < ranks; ++r) total_rows += rows[r] + m;
      for (int r = 0; r < ranks; ++r) {
        Request req;
        req.request_id = next_id++;
        req.rank = r;
        req.kind = CollectiveKind::kAllgather;
        req.dtype = DType::kInt32;
        req.shape = {rows[r] + m, 3};
        req.bytes = static_cast<uint64_t>(rows[r] + m) * 12;
        std::vector<int32_t> v((rows[r] + m) * 3);
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(r * 1000 + m * 100 + i);
        want[m].insert(want[m].end(), v.begin(), v.end());
        uint8_t* in = DeviceAlloc(req.bytes) + 4;  // unaligned input
        uint8_t* out = DeviceAlloc(total_rows * 12);
        if (!v.empty()) {
          EXPECT_EQ(cudaMemcpy(in, v.data(), req.bytes, cudaMemcpyHostToDevice), cudaSuccess);
        }
        outs[m].push_back(out);
        ResolvedIo io;
        io.input = {in, req.bytes, Event()};
        io.output = {out, static_cast<uint64_t>(total_rows) * 12, Event()};
        EXPECT_EQ(cudaEventRecord(io.input.event, nullptr), cudaSuccess);
        resolver_.io_[req.request_id] = io;
        member.set.requests.push_back(std::move(req));
      }
      response.members.push_back(std::move(member));
    }
    const absl::Status s = backend_->Execute(response, StepContext{});
    ASSERT_TRUE(s.ok()) << s;
    for (int m = 0; m < 2; ++m) {
      ASSERT_TRUE(response.members[m].status.ok()) << response.members[m].status;
      for (int r = 0; r < ranks; ++r) {
        std::vector<int32_t> got(want[m].size());
        ASSERT_EQ(cudaMemcpy(got.data(), outs[m][r], got.size() * 4, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        EXPECT_EQ(got, want[m]) << ranks << " ranks, member " << m << " rank " << r;
      }
    }
  }
}

// Reducescatter (sum and average) of [7, 5] float32 over 3 local ranks:
// rank 0 gets rows 0-2, rank 1 rows 3-4, rank 2 rows 5-6; checked on the
// host.
TEST_F(NcclBackendTest, ReducescattersEachRanksRows) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    UseRanks(3);
    const int ranks = 3;
    const int64_t total_rows = 7, cols = 5;
    const std::vector<int64_t> my_rows = {3, 2, 2};
    const std::vector<int64_t> first = {0, 3, 5};
    Response response;
    response.kind = CollectiveKind::kReducescatter;
    response.dtype = DType::kFloat32;
    response.op = op;
    FusedMember member;
    member.set.name = "rs";
    member.set.set_size = ranks;
    std::vector<float> sum(total_rows * cols, 0.0f);
    std::vector<uint8_t*> outs;
    for (int r = 0; r < ranks; ++r) {
      Request req;
      req.request_id = 100 + r;
      req.rank = r;
      req.kind = CollectiveKind::kReducescatter;
      req.dtype = DType::kFloat32;
      req.op = op;
      req.shape = {total_rows, cols};
      req.bytes = total_rows * cols * 4;
      std::vector<float> v(total_rows * cols);
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = static_cast<float>(r + 1) * 0.5f + static_cast<float>(i);
        sum[i] += v[i];
      }
      uint8_t* in = DeviceAlloc(req.bytes);
      uint8_t* out = DeviceAlloc(my_rows[r] * cols * 4);
      EXPECT_EQ(cudaMemcpy(in, v.data(), req.bytes, cudaMemcpyHostToDevice), cudaSuccess);
      outs.push_back(out);
      ResolvedIo io;
      io.input = {in, req.bytes, Event()};
      io.output = {out, static_cast<uint64_t>(my_rows[r] * cols * 4), Event()};
      EXPECT_EQ(cudaEventRecord(io.input.event, nullptr), cudaSuccess);
      resolver_.io_[req.request_id] = io;
      member.set.requests.push_back(std::move(req));
    }
    response.total_bytes = total_rows * cols * 4;
    response.members.push_back(std::move(member));
    const absl::Status s = backend_->Execute(response, StepContext{});
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(response.members[0].status.ok()) << response.members[0].status;
    const float scale = op == ReduceOp::kAverage ? 1.0f / ranks : 1.0f;
    for (int r = 0; r < ranks; ++r) {
      std::vector<float> got(my_rows[r] * cols);
      ASSERT_EQ(cudaMemcpy(got.data(), outs[r], got.size() * 4, cudaMemcpyDeviceToHost),
                cudaSuccess);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], sum[first[r] * cols + i] * scale, 1e-4)
            << "rank " << r << " element " << i;
      }
    }
  }
}

// An output of the wrong size fails that member alone, with the sizes.
TEST_F(NcclBackendTest, AGatherOutputOfTheWrongSizeFailsItsMember) {
  UseRanks(1);
  Response response;
  response.kind = CollectiveKind::kAllgather;
  response.dtype = DType::kFloat32;
  FusedMember member;
  member.set.name = "small";
  member.set.set_size = 1;
  Request req;
  req.request_id = 500;
  req.rank = 0;
  req.kind = CollectiveKind::kAllgather;
  req.shape = {4};
  req.bytes = 16;
  uint8_t* buf = DeviceAlloc(16);
  ResolvedIo io;
  io.input = {buf, 16, Event()};
  io.output = {buf, 8, Event()};
  resolver_.io_[req.request_id] = io;
  member.set.requests.push_back(std::move(req));
  response.members.push_back(std::move(member));
  EXPECT_TRUE(backend_->Execute(response, StepContext{}).ok());
  EXPECT_EQ(response.members[0].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(response.members[0].status.message().find("the gathered tensor has 16"),
            std::string::npos)
      << response.members[0].status;
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
  response.kind = CollectiveKind::kAlltoall;
  EXPECT_EQ(backend_->Execute(response, StepContext{}).code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kolo::daemon::nccl
