#include "daemon/algorithms/broadcast.h"

#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/algorithms/collective_test_util.h"
#include "daemon/transport/in_process_transport.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

constexpr uint64_t kTagBase = uint64_t{3} << 24;

TEST(TreeBroadcastTest, EveryRootEverySize) {
  for (int n = 1; n <= 5; ++n) {
    for (int root = 0; root < n; ++root) {
      for (size_t bytes : {size_t{0}, size_t{1}, size_t{1000}, (size_t{1} << 20) + 3}) {
        SCOPED_TRACE(absl::StrFormat("%d nodes, root %d, %d bytes", n, root, bytes));
        InProcessFabric fabric(n);
        std::vector<std::vector<std::byte>> bufs;
        for (int i = 0; i < n; ++i) {
          bufs.push_back(TestData(DType::kUint8, ReduceOp::kMin, i, bytes));
        }
        const std::vector<std::byte> want = bufs[root];
        const size_t chunk = bytes > 10000 ? (size_t{64} << 10) : 64;
        const absl::Time deadline = absl::Now() + absl::Seconds(60);
        std::vector<absl::Status> results = RunOnNodes(n, [&](int i) {
          return TreeBroadcast(fabric.endpoint(i), bufs[i].data(), bytes, root, kTagBase, deadline,
                               chunk);
        });
        for (int i = 0; i < n; ++i) {
          ASSERT_TRUE(results[i].ok()) << "node " << i << ": " << results[i];
          ASSERT_TRUE(bufs[i] == want) << "node " << i << " differs";
        }
        EXPECT_EQ(fabric.outstanding(), 0u);
      }
    }
  }
}

TEST(TreeBroadcastTest, RejectsBadRoot) {
  InProcessFabric fabric(2);
  char b = 0;
  EXPECT_EQ(
      TreeBroadcast(fabric.endpoint(0), &b, 1, 2, kTagBase, absl::Now() + absl::Seconds(1)).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(TreeBroadcastTest, AbortFailsEveryNode) {
  constexpr int kNodes = 4;
  InProcessFabric fabric(kNodes);
  std::vector<std::vector<std::byte>> bufs(kNodes, std::vector<std::byte>(1 << 20));
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  std::vector<absl::Status> results;
  // Root 3 never sends; the others wait on it.
  std::thread runner([&] {
    results = RunOnNodes(kNodes - 1, [&](int i) {
      return TreeBroadcast(fabric.endpoint(i), bufs[i].data(), bufs[i].size(), 3, kTagBase,
                           deadline, 4096);
    });
  });
  const int waiting[] = {0, 1, 2};
  EXPECT_TRUE(fabric.AwaitInFlight(waiting, deadline));
  for (int i = 0; i < kNodes; ++i) {
    fabric.endpoint(i).Abort(absl::AbortedError("job aborted"));
  }
  runner.join();
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  }
  EXPECT_EQ(fabric.outstanding(), 0u);
}

}  // namespace
}  // namespace kolo::daemon
