// One job across three simulated nodes in one process: three Jobs (one per
// "daemon", two ranks each), the real Coordinator (node A hosts rank 0 and
// reaches it directly; nodes B and C over the real Peer gRPC service on
// loopback), the real host multi-node backend, and an in-process fabric for
// the data (injected through the TransportFactory seam). Every collective
// runs across the nodes and every rank's result is checked.
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/wait_until.h"
#include "daemon/backend/fake_backend.h"
#include "daemon/job/default_negotiators.h"
#include "daemon/job/job.h"
#include "daemon/session/loopback_session.h"
#include "daemon/transport/in_process_transport.h"
#include "daemon/wire/loopback_coordinator.h"
#include "daemon/wire/peer_tls.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

const auto kPlaintext = std::make_shared<const PeerCredentials>(PeerCredentials::Plaintext());

constexpr int kNodes = 3;
constexpr int kRanksPerNode = 2;
constexpr int kSize = kNodes * kRanksPerNode;
constexpr uint64_t kResultBytes = 1 << 20;

// One rank's tensors: what it sends and where its in-place output goes.
struct Tensor {
  std::vector<float> input;
  std::vector<float> output;
};

// Each test runs twice: the nodes negotiating over the Peer plane only, and
// with data-plane lanes (as over UCX), where the steady state leaves the
// stream and names every node has cached go in direct rounds.
class ThreeNodeJobTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    coordinator_ = std::make_unique<LoopbackCoordinator>();
    ASSERT_TRUE(coordinator_->ok());
    for (int r = 0; r < kSize; ++r) {
      auto s = LoopbackSession::Create("job-3", r, kResultBytes);
      ASSERT_TRUE(s.ok()) << s.status();
      sessions_.push_back(std::move(*s));
    }
    for (int n = 0; n < kNodes; ++n) {
      JobLayout layout;
      layout.local_size = kRanksPerNode;
      layout.env.node_name = absl::StrCat("node", n);
      layout.env.peer_timeout = absl::Seconds(10);
      layout.env.transports = &transports_;
      layout.env.peer_credentials = kPlaintext;
      if (n == 0) {
        layout.env.coordinators = coordinator_->registry();
      } else {
        layout.coordinator = coordinator_->address();
      }
      jobs_.push_back(std::make_unique<Job>("job-3", "token", kSize, &host_, uint64_t{64} << 20,
                                            DefaultNegotiators(), JobObservers{}, layout));
    }
    for (int r = 0; r < kSize; ++r) {
      ASSERT_TRUE(job(r).AttachRank(r, absl::StrCat("session-", r), 100 + r).ok());
    }
    for (auto& j : jobs_) j->MaybeStart();
  }

  void TearDown() override {
    jobs_.clear();  // before the coordinator's service goes
    coordinator_.reset();
  }

  Job& job(int rank) { return *jobs_[rank / kRanksPerNode]; }

  Request MakeRequest(int rank, const std::string& name, CollectiveKind kind,
                      std::vector<int64_t> shape, const void* input, void* output) {
    Request r;
    r.request_id = next_request_id_++;
    r.rank = rank;
    r.kind = kind;
    r.dtype = DType::kFloat32;
    r.name = name;
    r.shape = std::move(shape);
    r.bytes = sizeof(float);
    for (int64_t d : r.shape) r.bytes *= static_cast<uint64_t>(d);
    r.input = static_cast<const uint8_t*>(input);
    r.output = static_cast<uint8_t*>(output);
    r.origin = sessions_[rank]->session();
    r.submitted_at = absl::Now();
    return r;
  }

  // Waits (up to 20 s) for `n` completions of every rank.
  std::vector<std::vector<ReceivedCompletion>> WaitFor(size_t n) {
    std::vector<std::vector<ReceivedCompletion>> got(kSize);
    WaitUntil(
        [&] {
          bool complete = true;
          for (int r = 0; r < kSize; ++r) {
            for (ReceivedCompletion& c : sessions_[r]->TakeCompletions()) got[r].push_back(c);
            complete = complete && got[r].size() >= n;
          }
          return complete;
        },
        absl::Seconds(20));
    for (int r = 0; r < kSize; ++r) EXPECT_EQ(got[r].size(), n) << "rank " << r;
    return got;
  }

  // Waits (up to 20 s) for one completion of each of `ranks`; by rank.
  std::vector<std::vector<ReceivedCompletion>> WaitForRanks(const std::vector<int>& ranks) {
    std::vector<std::vector<ReceivedCompletion>> got(kSize);
    WaitUntil(
        [&] {
          size_t n = 0;
          for (int r : ranks) {
            for (ReceivedCompletion& c : sessions_[r]->TakeCompletions()) got[r].push_back(c);
            n += got[r].size();
          }
          return n >= ranks.size();
        },
        absl::Seconds(20));
    return got;
  }

  // One completion of every rank, by rank.
  std::vector<ReceivedCompletion> WaitForEveryRank() {
    std::vector<ReceivedCompletion> out;
    for (auto& g : WaitFor(1)) out.push_back(g.empty() ? ReceivedCompletion{} : g.front());
    return out;
  }

  // A rank's result tensor (allgather, reducescatter, alltoall) as floats.
  std::vector<float> Result(int rank, const ReceivedCompletion& c) {
    const uint8_t* at = sessions_[rank]->session()->arena_base() + c.result_offset;
    std::vector<float> out(c.result_bytes / sizeof(float));
    std::memcpy(out.data(), at, out.size() * sizeof(float));
    return out;
  }

  std::unique_ptr<LoopbackCoordinator> coordinator_;
  InProcessFabric fabric_{kNodes, /*lanes=*/GetParam()};
  InProcessTransportFactory transports_{&fabric_};
  FakeBackend host_;  // one-node host backend: never used across nodes
  std::vector<std::unique_ptr<LoopbackSession>> sessions_;
  std::vector<std::unique_ptr<Job>> jobs_;
  uint64_t next_request_id_ = 1;
};

TEST_P(ThreeNodeJobTest, AllreduceOfFusedTensorsSumsAndAveragesOverEveryRank) {
  // Two tensors in one step (fused), one summed, one averaged, of odd sizes.
  const std::vector<int64_t> sizes = {5, 1031};
  std::vector<std::vector<Tensor>> t(2, std::vector<Tensor>(kSize));
  for (int i = 0; i < 2; ++i) {
    for (int r = 0; r < kSize; ++r) {
      t[i][r].input.resize(sizes[i]);
      for (int64_t k = 0; k < sizes[i]; ++k) t[i][r].input[k] = float(r + 1) * float(k % 7 + i);
      t[i][r].output.assign(sizes[i], -1.f);
    }
  }
  for (int r = 0; r < kSize; ++r) {
    for (int i = 0; i < 2; ++i) {
      Request q = MakeRequest(r, absl::StrCat("grad/", i), CollectiveKind::kAllreduce, {sizes[i]},
                              t[i][r].input.data(), t[i][r].output.data());
      q.op = i == 0 ? ReduceOp::kSum : ReduceOp::kAverage;
      job(r).Submit(std::move(q));
    }
  }
  const std::vector<std::vector<ReceivedCompletion>> done = WaitFor(2);
  for (int r = 0; r < kSize; ++r) {
    for (const ReceivedCompletion& c : done[r]) {
      ASSERT_EQ(c.code, absl::StatusCode::kOk) << c.message;
    }
    const float ranks_sum = kSize * (kSize + 1) / 2.f;  // sum of (r + 1)
    for (int i = 0; i < 2; ++i) {
      for (int64_t k = 0; k < sizes[i]; ++k) {
        const float sum = ranks_sum * float(k % 7 + i);
        ASSERT_FLOAT_EQ(t[i][r].output[k], i == 0 ? sum : sum / kSize)
            << "rank " << r << " tensor " << i << " element " << k;
      }
    }
  }
}

TEST_P(ThreeNodeJobTest, BroadcastFromARankOfTheMiddleNode) {
  constexpr int kRoot = 3;
  std::vector<Tensor> t(kSize);
  for (int r = 0; r < kSize; ++r) {
    t[r].input.assign(300, float(r));
    t[r].output.assign(300, -1.f);
  }
  for (int r = 0; r < kSize; ++r) {
    Request q = MakeRequest(r, "weights", CollectiveKind::kBroadcast, {300}, t[r].input.data(),
                            t[r].output.data());
    q.root_rank = kRoot;
    job(r).Submit(std::move(q));
  }
  const std::vector<ReceivedCompletion> done = WaitForEveryRank();
  for (int r = 0; r < kSize; ++r) {
    ASSERT_EQ(done[r].code, absl::StatusCode::kOk) << done[r].message;
    EXPECT_EQ(t[r].output, std::vector<float>(300, float(kRoot))) << "rank " << r;
  }
}

TEST_P(ThreeNodeJobTest, AllgatherOfUnevenRowsIncludingAnEmptyRank) {
  // Rank r contributes r rows (rank 0 none) of 3 columns, valued 10r + row.
  std::vector<Tensor> t(kSize);
  for (int r = 0; r < kSize; ++r) {
    for (int row = 0; row < r; ++row) t[r].input.insert(t[r].input.end(), 3, float(10 * r + row));
  }
  for (int r = 0; r < kSize; ++r) {
    job(r).Submit(
        MakeRequest(r, "ids", CollectiveKind::kAllgather, {r, 3}, t[r].input.data(), nullptr));
  }
  std::vector<float> want;
  for (int r = 0; r < kSize; ++r) want.insert(want.end(), t[r].input.begin(), t[r].input.end());
  const std::vector<ReceivedCompletion> done = WaitForEveryRank();
  for (int r = 0; r < kSize; ++r) {
    ASSERT_EQ(done[r].code, absl::StatusCode::kOk) << done[r].message;
    EXPECT_EQ(done[r].value, kSize * (kSize - 1) / 2) << "rank " << r;
    EXPECT_EQ(Result(r, done[r]), want) << "rank " << r;
  }
}

TEST_P(ThreeNodeJobTest, ReducescatterGivesEachRankItsRowsOfTheSum) {
  // 8 rows of 2 among 6 ranks: ranks 0 and 1 get 2 rows, the others 1.
  constexpr int kRows = 8;
  std::vector<Tensor> t(kSize);
  for (int r = 0; r < kSize; ++r) {
    for (int k = 0; k < kRows * 2; ++k) t[r].input.push_back(float(k) + float(r));
  }
  for (int r = 0; r < kSize; ++r) {
    job(r).Submit(MakeRequest(r, "rs", CollectiveKind::kReducescatter, {kRows, 2},
                              t[r].input.data(), nullptr));
  }
  const std::vector<ReceivedCompletion> done = WaitForEveryRank();
  int row = 0;
  for (int r = 0; r < kSize; ++r) {
    ASSERT_EQ(done[r].code, absl::StatusCode::kOk) << done[r].message;
    const int rows = r < kRows % kSize ? 2 : 1;
    EXPECT_EQ(done[r].value, rows);
    std::vector<float> want;
    for (int k = row * 2; k < (row + rows) * 2; ++k) {
      want.push_back(float(kSize) * float(k) + float(kSize * (kSize - 1) / 2));
    }
    EXPECT_EQ(Result(r, done[r]), want) << "rank " << r;
    row += rows;
  }
}

TEST_P(ThreeNodeJobTest, AlltoallWithUnevenSplitsAcrossNodes) {
  // Rank i sends (i + j) % 3 rows of one float to rank j, valued 100i + j.
  std::vector<Tensor> t(kSize);
  std::vector<std::vector<int64_t>> splits(kSize);
  for (int i = 0; i < kSize; ++i) {
    for (int j = 0; j < kSize; ++j) {
      splits[i].push_back((i + j) % 3);
      t[i].input.insert(t[i].input.end(), (i + j) % 3, float(100 * i + j));
    }
  }
  for (int i = 0; i < kSize; ++i) {
    Request q = MakeRequest(i, "a2a", CollectiveKind::kAlltoall,
                            {static_cast<int64_t>(t[i].input.size())}, t[i].input.data(), nullptr);
    q.aux = splits[i];
    job(i).Submit(std::move(q));
  }
  const std::vector<ReceivedCompletion> done = WaitForEveryRank();
  for (int j = 0; j < kSize; ++j) {
    ASSERT_EQ(done[j].code, absl::StatusCode::kOk) << done[j].message;
    // The result: a 64-byte header of rows received from each rank, then
    // the rows in rank order.
    const uint8_t* at = sessions_[j]->session()->arena_base() + done[j].result_offset;
    std::vector<float> rows;
    int64_t received = 0;
    for (int i = 0; i < kSize; ++i) {
      int64_t count;
      std::memcpy(&count, at + i * sizeof(int64_t), sizeof(count));
      EXPECT_EQ(count, (i + j) % 3) << "rank " << j << " from " << i;
      received += count;
      rows.insert(rows.end(), (i + j) % 3, float(100 * i + j));
    }
    EXPECT_EQ(done[j].value, received);
    std::vector<float> got(received);
    std::memcpy(got.data(), at + 64, received * sizeof(float));
    EXPECT_EQ(got, rows) << "rank " << j;
  }
}

TEST_P(ThreeNodeJobTest, BarrierCompletesOnceEveryRankArrives) {
  for (int r = 0; r < kSize; ++r) {
    job(r).Submit(MakeRequest(r, "sync", CollectiveKind::kBarrier, {}, nullptr, nullptr));
  }
  for (const ReceivedCompletion& c : WaitForEveryRank()) {
    EXPECT_EQ(c.code, absl::StatusCode::kOk) << c.message;
  }
}

TEST_P(ThreeNodeJobTest, AProcessSetSpanningTwoNodesRunsWithoutTheThird) {
  // The set {1, 4}: nodes A and C; node B hosts none of its ranks.
  std::vector<int64_t> ranks = {1, 4};
  for (int r = 0; r < kSize; ++r) {
    Request q = MakeRequest(r, "add", CollectiveKind::kAddProcessSet, {}, nullptr, nullptr);
    q.aux = ranks;
    job(r).Submit(std::move(q));
  }
  std::vector<ReceivedCompletion> added = WaitForEveryRank();
  const int set = static_cast<int>(added[0].value);
  for (const ReceivedCompletion& c : added) {
    ASSERT_EQ(c.code, absl::StatusCode::kOk) << c.message;
    EXPECT_EQ(c.value, set);
  }
  std::vector<Tensor> t(kSize);
  for (int r : {1, 4}) {
    t[r].input.assign(100, float(r));
    t[r].output.assign(100, 0.f);
    Request q = MakeRequest(r, "set/grad", CollectiveKind::kAllreduce, {100}, t[r].input.data(),
                            t[r].output.data());
    q.process_set = set;
    job(r).Submit(std::move(q));
  }
  std::vector<ReceivedCompletion> got;
  WaitUntil(
      [&] {
        for (int r : {1, 4}) {
          for (ReceivedCompletion& c : sessions_[r]->TakeCompletions()) got.push_back(c);
        }
        return got.size() >= 2;
      },
      absl::Seconds(20));
  ASSERT_EQ(got.size(), 2u);
  for (const ReceivedCompletion& c : got) EXPECT_EQ(c.code, absl::StatusCode::kOk) << c.message;
  for (int r : {1, 4}) EXPECT_EQ(t[r].output, std::vector<float>(100, 5.f)) << "rank " << r;
}

TEST_P(ThreeNodeJobTest, NodesThatDisagreeFailTheTensorOnEveryRank) {
  // Node C's ranks send 5 elements where the others send 4.
  std::vector<Tensor> t(kSize);
  for (int r = 0; r < kSize; ++r) {
    const int64_t n = r >= 4 ? 5 : 4;
    t[r].input.assign(n, 1.f);
    t[r].output.assign(n, 0.f);
    job(r).Submit(MakeRequest(r, "bad", CollectiveKind::kAllreduce, {n}, t[r].input.data(),
                              t[r].output.data()));
  }
  for (const ReceivedCompletion& c : WaitForEveryRank()) {
    EXPECT_EQ(c.code, absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(c.message.find("shape"), std::string::npos) << c.message;
  }
  // The job goes on: the next tensor runs.
  for (int r = 0; r < kSize; ++r) {
    t[r].input.assign(4, 2.f);
    t[r].output.assign(4, 0.f);
    job(r).Submit(MakeRequest(r, "good", CollectiveKind::kAllreduce, {4}, t[r].input.data(),
                              t[r].output.data()));
  }
  for (const ReceivedCompletion& c : WaitForEveryRank()) {
    EXPECT_EQ(c.code, absl::StatusCode::kOk) << c.message;
  }
  for (int r = 0; r < kSize; ++r) EXPECT_EQ(t[r].output, std::vector<float>(4, 2.f * kSize));
}

TEST_P(ThreeNodeJobTest, GroupedAllreduceRunsAsOneUnit) {
  std::vector<std::vector<Tensor>> t(2, std::vector<Tensor>(kSize));
  for (int r = 0; r < kSize; ++r) {
    for (int i = 0; i < 2; ++i) {
      t[i][r].input.assign(10 + i, float(r + i));
      t[i][r].output.assign(10 + i, 0.f);
      Request q = MakeRequest(r, absl::StrCat("group/", i), CollectiveKind::kAllreduce, {10 + i},
                              t[i][r].input.data(), t[i][r].output.data());
      q.group_id = 7;
      q.group_size = 2;
      job(r).Submit(std::move(q));
    }
  }
  for (const auto& cs : WaitFor(2)) {
    for (const ReceivedCompletion& c : cs) EXPECT_EQ(c.code, absl::StatusCode::kOk) << c.message;
  }
  for (int r = 0; r < kSize; ++r) {
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(t[i][r].output,
                std::vector<float>(10 + i, float(kSize * (kSize - 1) / 2 + kSize * i)))
          << "rank " << r << " tensor " << i;
    }
  }
}

TEST_P(ThreeNodeJobTest, CompressedAllreduceTravelsAsHalfPrecision) {
  std::vector<Tensor> t(kSize);
  for (int r = 0; r < kSize; ++r) {
    t[r].input.assign(64, 0.25f * float(r + 1));
    t[r].output.assign(64, 0.f);
    Request q = MakeRequest(r, "compressed", CollectiveKind::kAllreduce, {64}, t[r].input.data(),
                            t[r].output.data());
    q.compression = Compression::kFloat16;
    job(r).Submit(std::move(q));
  }
  for (const ReceivedCompletion& c : WaitForEveryRank()) {
    EXPECT_EQ(c.code, absl::StatusCode::kOk) << c.message;
  }
  // 0.25 * (1 + ... + 6) = 5.25, exact in float16.
  for (int r = 0; r < kSize; ++r) EXPECT_EQ(t[r].output, std::vector<float>(64, 5.25f));
}

TEST_P(ThreeNodeJobTest, ANodeWhoseRanksJoinedTakesPartWithZerosUntilEveryRankJoins) {
  // Node B's ranks (2, 3) join at once; the others allreduce once more, with
  // node B contributing zeros, then join too.
  for (int r : {2, 3}) {
    job(r).Submit(MakeRequest(r, "join", CollectiveKind::kJoin, {}, nullptr, nullptr));
  }
  std::vector<Tensor> t(kSize);
  const std::vector<int> active = {0, 1, 4, 5};
  for (int r : active) {
    t[r].input.assign(8, 1.f);
    t[r].output.assign(8, 0.f);
    job(r).Submit(MakeRequest(r, "last/grad", CollectiveKind::kAllreduce, {8}, t[r].input.data(),
                              t[r].output.data()));
  }
  std::vector<std::vector<ReceivedCompletion>> got = WaitForRanks(active);
  for (int r : active) {
    ASSERT_EQ(got[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(got[r][0].code, absl::StatusCode::kOk) << got[r][0].message;
    EXPECT_EQ(t[r].output, std::vector<float>(8, 4.f)) << "rank " << r;
  }
  for (int r : active) {
    job(r).Submit(MakeRequest(r, "join", CollectiveKind::kJoin, {}, nullptr, nullptr));
  }
  const std::vector<ReceivedCompletion> joined = WaitForEveryRank();
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(joined[r].code, absl::StatusCode::kOk) << joined[r].message;
    EXPECT_EQ(joined[r].value, joined[0].value) << "every rank learns the same last rank";
  }
  EXPECT_TRUE(joined[0].value == 1 || joined[0].value == 5) << joined[0].value;
}

// Steps of the same names, submitted in another order on every node: once
// cached they agree in direct rounds (with lanes), every step sums right, a
// name whose shape changes on one node fails on every rank and then goes on,
// and a node whose ranks join ends the rounds without losing a step.
TEST_P(ThreeNodeJobTest, RepeatedStepsAgreeInAnyOrderThenAChangeAndAJoin) {
  constexpr int kNames = 5;
  constexpr int kSteps = 12;
  std::vector<std::vector<Tensor>> t(kNames, std::vector<Tensor>(kSize));
  auto submit = [&](int r, int i, int64_t n) {
    t[i][r].input.assign(static_cast<size_t>(n), float(r + 1));
    t[i][r].output.assign(static_cast<size_t>(n), -1.f);
    job(r).Submit(MakeRequest(r, absl::StrCat("step/", i), CollectiveKind::kAllreduce, {n},
                              t[i][r].input.data(), t[i][r].output.data()));
  };
  const float ranks_sum = kSize * (kSize + 1) / 2.f;
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < kSize; ++r) {
      // Node n submits the names rotated by n + step.
      const int node = r / kRanksPerNode;
      for (int k = 0; k < kNames; ++k) {
        const int i = (k + node + step) % kNames;
        submit(r, i, 4 + i % 3);
      }
    }
    const auto done = WaitFor(kNames);
    for (int r = 0; r < kSize; ++r) {
      for (const ReceivedCompletion& c : done[r])
        ASSERT_EQ(c.code, absl::StatusCode::kOk) << c.message;
      for (int i = 0; i < kNames; ++i) {
        ASSERT_EQ(t[i][r].output[0], ranks_sum)
            << "step " << step << " rank " << r << " name " << i;
      }
    }
  }
  // Node 2's ranks change the shape of step/0.
  for (int r = 0; r < kSize; ++r) submit(r, 0, r >= 4 ? 9 : 4);
  for (const ReceivedCompletion& c : WaitForEveryRank()) {
    EXPECT_EQ(c.code, absl::StatusCode::kFailedPrecondition) << c.message;
  }
  for (int r = 0; r < kSize; ++r) submit(r, 0, 4);
  for (int r = 0; r < kSize; ++r) submit(r, 1, 5);
  const auto again = WaitFor(2);
  for (int r = 0; r < kSize; ++r) {
    for (const ReceivedCompletion& c : again[r]) ASSERT_EQ(c.code, absl::StatusCode::kOk);
    EXPECT_EQ(t[0][r].output[0], ranks_sum);
    EXPECT_EQ(t[1][r].output[0], ranks_sum);
  }
  // Node 1's ranks join; the others run step/2 once more (node 1 adds
  // zeros), then join.
  for (int r : {2, 3}) {
    job(r).Submit(MakeRequest(r, "join", CollectiveKind::kJoin, {}, nullptr, nullptr));
  }
  const std::vector<int> active = {0, 1, 4, 5};
  for (int r : active) submit(r, 2, 6);
  std::vector<std::vector<ReceivedCompletion>> got = WaitForRanks(active);
  for (int r : active) {
    ASSERT_EQ(got[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(got[r][0].code, absl::StatusCode::kOk) << got[r][0].message;
    EXPECT_EQ(t[2][r].output[0], 1.f + 2.f + 5.f + 6.f) << "rank " << r;
  }
  for (int r : active) {
    job(r).Submit(MakeRequest(r, "join", CollectiveKind::kJoin, {}, nullptr, nullptr));
  }
  for (const ReceivedCompletion& c : WaitForEveryRank()) {
    EXPECT_EQ(c.code, absl::StatusCode::kOk) << c.message;
  }
  // With lanes the steady state went over them.
  if (GetParam()) {
    EXPECT_GT(job(2).Snapshot().data_plane_negotiation, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Negotiation, ThreeNodeJobTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "DataPlaneLanes" : "PeerPlaneOnly";
                         });

}  // namespace
}  // namespace kolo::daemon
