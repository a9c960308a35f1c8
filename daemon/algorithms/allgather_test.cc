#include "daemon/algorithms/allgather.h"
#include "daemon/algorithms/allreduce.h"
#include "daemon/transport/subset_transport.h"

#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/algorithms/collective_test_util.h"
#include "daemon/transport/in_process_transport.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

constexpr uint64_t kTagBase = uint64_t{5} << 24;

TEST(RingAllgatherVTest, EveryNodeGetsEveryBlock) {
  for (int n = 1; n <= 5; ++n) {
    // Block sizes vary per node, including empty ones and a large one.
    std::vector<uint64_t> sizes(n), offsets(n);
    uint64_t total = 0;
    for (int i = 0; i < n; ++i) {
      sizes[i] = i == 1 ? 0 : (i == 2 ? (uint64_t{1} << 20) + 7 : 13 * (i + 1));
      offsets[i] = total;
      total += sizes[i];
    }
    SCOPED_TRACE(absl::StrFormat("%d nodes, %d bytes", n, total));
    InProcessFabric fabric(n);
    std::vector<std::vector<std::byte>> want(1, std::vector<std::byte>(total));
    for (uint64_t b = 0; b < total; ++b) want[0][b] = std::byte(b * 31 + 7);
    std::vector<std::vector<std::byte>> bufs(n, std::vector<std::byte>(total, std::byte{0xEE}));
    for (int i = 0; i < n; ++i) {
      std::memcpy(bufs[i].data() + offsets[i], want[0].data() + offsets[i], sizes[i]);
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    std::vector<absl::Status> results = RunOnNodes(n, [&](int i) {
      return RingAllgatherV(fabric.endpoint(i), bufs[i].data(), offsets, sizes, kTagBase, deadline);
    });
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(results[i].ok()) << "node " << i << ": " << results[i];
      ASSERT_TRUE(bufs[i] == want[0]) << "node " << i << " differs";
    }
    EXPECT_EQ(fabric.outstanding(), 0u);
  }
}

TEST(RingAllgatherVTest, RejectsWrongBlockCounts) {
  InProcessFabric fabric(2);
  char b = 0;
  EXPECT_EQ(
      RingAllgatherV(fabric.endpoint(0), &b, {0}, {1}, kTagBase, absl::Now() + absl::Seconds(1))
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(RingAllgatherVTest, AbortFailsEveryNode) {
  constexpr int kNodes = 3;
  InProcessFabric fabric(kNodes);
  std::vector<std::vector<std::byte>> bufs(kNodes, std::vector<std::byte>(3 << 20));
  const std::vector<uint64_t> offsets = {0, 1 << 20, 2 << 20};
  const std::vector<uint64_t> sizes = {1 << 20, 1 << 20, 1 << 20};
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  std::vector<absl::Status> results;
  // Node 2 never takes part; the others wait on it.
  std::thread runner([&] {
    results = RunOnNodes(kNodes - 1, [&](int i) {
      return RingAllgatherV(fabric.endpoint(i), bufs[i].data(), offsets, sizes, kTagBase, deadline);
    });
  });
  const int waiting[] = {0, 1};
  EXPECT_TRUE(fabric.AwaitInFlight(waiting, deadline));
  for (int i = 0; i < kNodes; ++i) fabric.endpoint(i).Abort(absl::AbortedError("job aborted"));
  runner.join();
  for (const absl::Status& s : results) EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_EQ(fabric.outstanding(), 0u);
}

TEST(SubsetTransportTest, AlgorithmsRunAmongSomeNodes) {
  // Nodes 1, 3 and 4 of 5 allreduce among themselves; 0 and 2 do nothing.
  InProcessFabric fabric(5);
  const std::vector<int> subset = {1, 3, 4};
  std::vector<std::vector<float>> bufs(5, std::vector<float>(1000));
  for (int i = 0; i < 5; ++i) {
    for (size_t k = 0; k < bufs[i].size(); ++k) bufs[i][k] = static_cast<float>(i * 10 + k % 7);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::vector<absl::Status> results = RunOnNodes(3, [&](int i) {
    SubsetTransport t(fabric.endpoint(subset[i]), subset);
    if (!t.member() || t.node() != i || t.nodes() != 3) {
      return absl::InternalError("wrong subset view");
    }
    return Allreduce(t, bufs[subset[i]].data(), bufs[subset[i]].size(), DType::kFloat32,
                     ReduceOp::kSum, kTagBase, deadline);
  });
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(results[i].ok()) << results[i];
  for (int n : subset) {
    for (size_t k = 0; k < bufs[n].size(); ++k) {
      ASSERT_EQ(bufs[n][k], static_cast<float>(80 + 3 * (k % 7))) << "node " << n;
    }
  }
  EXPECT_EQ(bufs[0][1], 1.0f);  // untouched
  EXPECT_FALSE(SubsetTransport(fabric.endpoint(0), subset).member());
  EXPECT_EQ(fabric.outstanding(), 0u);
}

}  // namespace
}  // namespace kolo::daemon
