// The host multi-node backend on its own: three nodes of two ranks each in
// one process over an in-process fabric, each node running its backend on
// its own thread with the same planned response (as the coordinator's plan
// makes every node do), and every rank's output checked.
#include "daemon/backend/host_multinode/host_multinode_backend.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/algorithms/adasum.h"
#include "daemon/algorithms/collective_test_util.h"
#include "daemon/exec/session_results.h"
#include "daemon/plan/fusion_planner.h"
#include "daemon/session/loopback_session.h"
#include "daemon/transport/in_process_transport.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

constexpr int kNodes = 3;
constexpr int kPerNode = 2;
constexpr int kSize = kNodes * kPerNode;

class HostMultinodeBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<int> node_of(kSize);
    for (int r = 0; r < kSize; ++r) node_of[r] = r / kPerNode;
    for (int n = 0; n < kNodes; ++n) {
      backends_.push_back(std::make_unique<HostMultinodeBackend>(&fabric_.endpoint(n), node_of));
    }
    for (int r = 0; r < kSize; ++r) {
      auto s = LoopbackSession::Create("job-h", r, 1 << 16);
      ASSERT_TRUE(s.ok()) << s.status();
      sessions_.push_back(std::move(*s));
    }
  }

  // Node `node`'s ready set of `name`: its ranks' requests.
  ReadySet Set(int node, const std::string& name, CollectiveKind kind, std::vector<int64_t> shape,
               std::vector<std::vector<float>>& in, std::vector<std::vector<float>>& out) {
    ReadySet set;
    set.name = name;
    set.set_size = kSize;
    for (int r = node * kPerNode; r < (node + 1) * kPerNode; ++r) {
      Request q;
      q.rank = r;
      q.request_id = r;
      q.kind = kind;
      q.dtype = DType::kFloat32;
      q.shape = shape;
      q.bytes = in[r].size() * sizeof(float);
      q.input = reinterpret_cast<const uint8_t*>(in[r].data());
      q.output = out.empty() ? nullptr : reinterpret_cast<uint8_t*>(out[r].data());
      q.origin = sessions_[r]->session();
      set.requests.push_back(std::move(q));
    }
    return set;
  }

  // Runs each node's response on its own thread with `step`.
  std::vector<absl::Status> RunEverywhere(std::vector<Response>& responses,
                                          const StepContext& step) {
    return RunOnNodes(kNodes, [&](int n) { return backends_[n]->Execute(responses[n], step); });
  }

  InProcessFabric fabric_{kNodes};
  SessionResults results_;  // new tensors go to the sessions' result areas
  std::vector<std::unique_ptr<HostMultinodeBackend>> backends_;
  std::vector<std::unique_ptr<LoopbackSession>> sessions_;
};

TEST_F(HostMultinodeBackendTest, FusedAllreduceAveragesEveryRanksTensors) {
  std::vector<std::vector<float>> a_in(kSize), a_out(kSize), b_in(kSize), b_out(kSize);
  for (int r = 0; r < kSize; ++r) {
    a_in[r].assign(7, float(r));
    a_out[r].assign(7, -1.f);
    b_in[r].assign(1000, float(2 * r));
    b_out[r].assign(1000, -1.f);
  }
  std::vector<Response> responses;
  for (int n = 0; n < kNodes; ++n) {
    std::vector<ReadySet> sets;
    sets.push_back(Set(n, "a", CollectiveKind::kAllreduce, {7}, a_in, a_out));
    sets.push_back(Set(n, "b", CollectiveKind::kAllreduce, {1000}, b_in, b_out));
    for (ReadySet& s : sets) {
      for (Request& q : s.requests) q.op = ReduceOp::kAverage;
    }
    std::vector<Response> fused = PlanFusion(std::move(sets), UINT64_MAX);
    ASSERT_EQ(fused.size(), 1u);
    responses.push_back(std::move(fused.front()));
  }
  for (const absl::Status& s : RunEverywhere(responses, StepContext{})) ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(a_out[r], std::vector<float>(7, 2.5f)) << "rank " << r;
    EXPECT_EQ(b_out[r], std::vector<float>(1000, 5.f)) << "rank " << r;
  }
  EXPECT_EQ(fabric_.outstanding(), 0u);
}

// Adasum of two fused tensors: each tensor's tree over each node's ranks,
// then over the nodes, the same on every rank.
TEST_F(HostMultinodeBackendTest, FusedAdasumCombinesEachTensorOverNodesAndRanks) {
  const std::vector<size_t> sizes = {5, 3000};
  std::vector<std::vector<std::vector<float>>> in(2, std::vector<std::vector<float>>(kSize)),
      out(2, std::vector<std::vector<float>>(kSize));
  for (size_t t = 0; t < 2; ++t) {
    for (int r = 0; r < kSize; ++r) {
      for (size_t i = 0; i < sizes[t]; ++i) {
        in[t][r].push_back(std::sin(0.1f * i + r + 3 * t) + 0.2f * r);
      }
      out[t][r].assign(sizes[t], -1.f);
    }
  }
  std::vector<Response> responses;
  for (int n = 0; n < kNodes; ++n) {
    std::vector<ReadySet> sets;
    for (size_t t = 0; t < 2; ++t) {
      sets.push_back(Set(n, absl::StrCat("t", t), CollectiveKind::kAllreduce,
                         {static_cast<int64_t>(sizes[t])}, in[t], out[t]));
      for (Request& q : sets.back().requests) q.op = ReduceOp::kAdasum;
    }
    std::vector<Response> fused = PlanFusion(std::move(sets), UINT64_MAX);
    ASSERT_EQ(fused.size(), 1u);
    responses.push_back(std::move(fused.front()));
  }
  for (const absl::Status& s : RunEverywhere(responses, StepContext{})) ASSERT_TRUE(s.ok()) << s;
  for (size_t t = 0; t < 2; ++t) {
    std::vector<std::vector<float>> per_node(kNodes, std::vector<float>(sizes[t]));
    std::vector<const void*> nodes;
    for (int n = 0; n < kNodes; ++n) {
      const void* ranks[] = {in[t][2 * n].data(), in[t][2 * n + 1].data()};
      ASSERT_TRUE(AdasumTree(DType::kFloat32, ranks, per_node[n].data(), sizes[t]).ok());
      nodes.push_back(per_node[n].data());
    }
    std::vector<float> want(sizes[t]);
    ASSERT_TRUE(AdasumTree(DType::kFloat32, nodes, want.data(), sizes[t]).ok());
    for (int r = 0; r < kSize; ++r) {
      EXPECT_EQ(out[t][r], out[t][0]) << "tensor " << t << " rank " << r;
      for (size_t i = 0; i < sizes[t]; ++i) {
        ASSERT_NEAR(out[t][r][i], want[i], 1e-5) << "tensor " << t << " element " << i;
      }
    }
  }
  EXPECT_EQ(fabric_.outstanding(), 0u);
}

// Large enough for the ring, in place, with both scales: the nodes reduce
// the tensors where they lie (rank 0's of each node holds the local sum)
// and every rank ends with the scaled sum.
TEST_F(HostMultinodeBackendTest, FusedAllreduceInPlaceAppliesBothScales) {
  std::vector<std::vector<float>> a(kSize), b(kSize);
  for (int r = 0; r < kSize; ++r) {
    a[r].assign(30001, float(r + 1));
    b[r].assign(20000, float(3 * r));
  }
  std::vector<Response> responses;
  for (int n = 0; n < kNodes; ++n) {
    std::vector<ReadySet> sets;
    sets.push_back(Set(n, "a", CollectiveKind::kAllreduce, {30001}, a, a));
    sets.push_back(Set(n, "b", CollectiveKind::kAllreduce, {20000}, b, b));
    for (ReadySet& s : sets) {
      for (Request& q : s.requests) {
        q.op = ReduceOp::kSum;
        q.prescale = 0.5;
        q.postscale = 4.0;
      }
    }
    std::vector<Response> fused = PlanFusion(std::move(sets), UINT64_MAX);
    ASSERT_EQ(fused.size(), 1u);
    responses.push_back(std::move(fused.front()));
  }
  for (const absl::Status& s : RunEverywhere(responses, StepContext{})) ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(a[r], std::vector<float>(30001, 21.f * 2)) << "rank " << r;
    EXPECT_EQ(b[r], std::vector<float>(20000, 45.f * 2)) << "rank " << r;
  }
  EXPECT_EQ(fabric_.outstanding(), 0u);
}

TEST_F(HostMultinodeBackendTest, AJoinedNodeTakesPartWithZeros) {
  std::vector<std::vector<float>> in(kSize), out(kSize);
  for (int r = 0; r < kSize; ++r) {
    in[r].assign(33, 1.f);
    out[r].assign(33, -1.f);
  }
  std::vector<Response> responses(kNodes);
  for (int n = 0; n < 2; ++n) {
    std::vector<ReadySet> sets;
    sets.push_back(Set(n, "g", CollectiveKind::kAllreduce, {33}, in, out));
    sets.back().joined = kPerNode;  // node 2's ranks
    responses[n] = std::move(PlanFusion(std::move(sets), UINT64_MAX).front());
  }
  responses[2].kind = CollectiveKind::kAllreduce;
  responses[2].dtype = DType::kFloat32;
  std::vector<StepContext> steps(kNodes);
  steps[2].joined_here = true;
  steps[2].joined_member_bytes = {33 * sizeof(float)};
  std::vector<absl::Status> results =
      RunOnNodes(kNodes, [&](int n) { return backends_[n]->Execute(responses[n], steps[n]); });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < 2 * kPerNode; ++r) {
    EXPECT_EQ(out[r], std::vector<float>(33, 4.f)) << "rank " << r;
  }
}

TEST_F(HostMultinodeBackendTest, AllgatherPlacesEveryRanksRowsInEachResult) {
  std::vector<std::vector<float>> in(kSize), none;
  StepContext step;
  step.results = &results_;
  for (int r = 0; r < kSize; ++r) {
    in[r].assign(r % 3, float(r));  // 0, 1 or 2 rows of one float
    step.rows.push_back(r % 3);
  }
  std::vector<Response> responses;
  for (int n = 0; n < kNodes; ++n) {
    std::vector<ReadySet> sets;
    sets.push_back(Set(n, "ag", CollectiveKind::kAllgather, {0}, in, none));
    for (Request& q : sets.back().requests) q.shape = {q.rank % 3};
    responses.push_back(std::move(PlanFusion(std::move(sets), UINT64_MAX).front()));
  }
  for (const absl::Status& s : RunEverywhere(responses, step)) ASSERT_TRUE(s.ok()) << s;
  std::vector<float> want;
  for (int r = 0; r < kSize; ++r) want.insert(want.end(), in[r].begin(), in[r].end());
  for (int n = 0; n < kNodes; ++n) {
    const FusedMember& m = responses[n].members.front();
    ASSERT_EQ(m.results.size(), static_cast<size_t>(kPerNode));
    for (size_t i = 0; i < m.results.size(); ++i) {
      const Request& q = m.set.requests[i];
      std::vector<float> got(m.results[i].bytes / sizeof(float));
      std::memcpy(got.data(), q.origin->arena_base() + m.results[i].offset,
                  got.size() * sizeof(float));
      EXPECT_EQ(got, want) << "rank " << q.rank;
      EXPECT_EQ(m.results[i].value, static_cast<int64_t>(want.size()));
    }
  }
}

TEST_F(HostMultinodeBackendTest, APlanThatDisagreesWithTheTensorsHereFailsClearly) {
  // The plan says rank 0 has 5 rows; it has 1.
  std::vector<std::vector<float>> in(kSize, std::vector<float>(1, 1.f)), none;
  StepContext step;
  step.results = &results_;
  step.rows.assign(kSize, 1);
  step.rows[0] = 5;
  std::vector<Response> responses;
  for (int n = 0; n < kNodes; ++n) {
    std::vector<ReadySet> sets;
    sets.push_back(Set(n, "ag", CollectiveKind::kAllgather, {1}, in, none));
    responses.push_back(std::move(PlanFusion(std::move(sets), UINT64_MAX).front()));
  }
  absl::Status s = backends_[0]->Execute(responses[0], step);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("rank 0 has 4 bytes"), std::string::npos) << s;
}

}  // namespace
}  // namespace kolo::daemon
