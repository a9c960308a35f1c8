#include "daemon/algorithms/alltoall.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/algorithms/collective_test_util.h"
#include "daemon/transport/in_process_transport.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

constexpr uint64_t kTagBase = uint64_t{9} << 24;

// Bytes node i sends node j: a size that varies per pair (some empty, one
// large), filled with a pattern naming the pair.
uint64_t PairBytes(int i, int j) {
  if ((i + j) % 3 == 0) return 0;
  return i == 1 && j == 2 ? 300000 : 17 * (i + 1) + j;
}
uint8_t Pattern(int i, int j, uint64_t b) { return static_cast<uint8_t>(i * 37 + j * 11 + b); }

TEST(PairwiseAlltoallTest, EveryPairExchangesItsBytes) {
  for (int n = 1; n <= 4; ++n) {
    SCOPED_TRACE(absl::StrFormat("%d nodes", n));
    InProcessFabric fabric(n);
    std::vector<std::vector<std::vector<uint8_t>>> out(n), in(n);
    for (int i = 0; i < n; ++i) {
      out[i].resize(n);
      in[i].resize(n);
      for (int j = 0; j < n; ++j) {
        out[i][j].resize(PairBytes(i, j));
        for (uint64_t b = 0; b < out[i][j].size(); ++b) out[i][j][b] = Pattern(i, j, b);
        in[i][j].assign(PairBytes(j, i), 0xEE);
      }
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    std::vector<absl::Status> results = RunOnNodes(n, [&](int i) {
      std::vector<absl::Span<const uint8_t>> send;
      std::vector<absl::Span<uint8_t>> recv;
      for (int j = 0; j < n; ++j) {
        send.emplace_back(out[i][j]);
        recv.emplace_back(absl::MakeSpan(in[i][j]));
      }
      return PairwiseAlltoall(fabric.endpoint(i), send, recv, kTagBase, deadline);
    });
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(results[i].ok()) << "node " << i << ": " << results[i];
      for (int j = 0; j < n; ++j) {
        if (j == i) continue;
        EXPECT_EQ(in[i][j], out[j][i]) << "node " << i << " from node " << j;
      }
    }
    EXPECT_EQ(fabric.outstanding(), 0u);
  }
}

TEST(PairwiseAlltoallTest, RejectsWrongBufferCounts) {
  InProcessFabric fabric(2);
  std::vector<absl::Span<const uint8_t>> send(1);
  std::vector<absl::Span<uint8_t>> recv(2);
  EXPECT_EQ(
      PairwiseAlltoall(fabric.endpoint(0), send, recv, kTagBase, absl::Now() + absl::Seconds(1))
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(PairwiseAlltoallTest, AbortFailsTheExchangeAndLeavesNothingBehind) {
  InProcessFabric fabric(3);
  std::vector<uint8_t> buf(64);
  // Node 2 never takes part; nodes 0 and 1 wait on it until a third thread
  // aborts them.
  std::vector<absl::Status> results = RunOnNodes(3, [&](int i) -> absl::Status {
    if (i == 2) {
      EXPECT_TRUE(fabric.AwaitInFlight({0, 1}, absl::Now() + absl::Seconds(30)));
      fabric.endpoint(0).Abort(absl::UnavailableError("node 2 is gone"));
      fabric.endpoint(1).Abort(absl::UnavailableError("node 2 is gone"));
      return absl::AbortedError("the aborter");
    }
    std::vector<absl::Span<const uint8_t>> send(3, absl::Span<const uint8_t>(buf));
    std::vector<std::vector<uint8_t>> in(3, std::vector<uint8_t>(64));
    std::vector<absl::Span<uint8_t>> recv;
    for (auto& b : in) recv.emplace_back(absl::MakeSpan(b));
    return PairwiseAlltoall(fabric.endpoint(i), send, recv, kTagBase,
                            absl::Now() + absl::Seconds(30));
  });
  for (const absl::Status& s : results) EXPECT_FALSE(s.ok());
  EXPECT_EQ(fabric.outstanding(), 0u);
}

}  // namespace
}  // namespace kolo::daemon
