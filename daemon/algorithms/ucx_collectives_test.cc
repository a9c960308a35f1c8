// The collectives over real UcxTransports joined by loopback tcp in one
// process.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "daemon/algorithms/allreduce.h"
#include "daemon/algorithms/broadcast.h"
#include "daemon/algorithms/collective_test_util.h"
#include "daemon/transport/ucx_loopback_cluster.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

UcxLoopbackCluster MakeCluster(int n) {
  absl::StatusOr<UcxLoopbackCluster> c = UcxLoopbackCluster::Create(n);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

void CheckAllreduce(UcxLoopbackCluster& c, DType dtype, ReduceOp op, size_t count,
                    uint64_t tag_base) {
  SCOPED_TRACE(absl::StrFormat("%d nodes, %s %s, %d elements", c.nodes(), DTypeName(dtype),
                               ReduceOpName(op), count));
  const int n = c.nodes();
  std::vector<std::vector<std::byte>> bufs;
  for (int i = 0; i < n; ++i) bufs.push_back(TestData(dtype, op, i, count));
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  std::vector<absl::Status> results = RunOnNodes(n, [&](int i) {
    return Allreduce(c.node(i), bufs[i].data(), count, dtype, op, tag_base, deadline);
  });
  const std::vector<std::byte> want = SerialReference(dtype, op, n, count);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(results[i].ok()) << "node " << i << ": " << results[i];
    ASSERT_TRUE(bufs[i] == want) << "node " << i << " differs";
  }
}

class UcxCollectivesTest : public testing::TestWithParam<int> {};

TEST_P(UcxCollectivesTest, AllreduceMatchesSerialReference) {
  UcxLoopbackCluster c = MakeCluster(GetParam());
  uint64_t tag = 1;
  for (DType dtype :
       {DType::kUint8, DType::kInt8, DType::kInt16, DType::kUint16, DType::kInt32, DType::kInt64,
        DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64, DType::kBool}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{100003}}) {
        CheckAllreduce(c, dtype, op, count, (tag++) << 24);
      }
    }
  }
  // Large float32 sums through the ring: 4, 16 and 64 MiB per node.
  for (size_t mib : {4, 16, 64}) {
    CheckAllreduce(c, DType::kFloat32, ReduceOp::kSum, mib << 18, (tag++) << 24);
  }
}

TEST_P(UcxCollectivesTest, BroadcastFromEveryRoot) {
  UcxLoopbackCluster c = MakeCluster(GetParam());
  const int n = c.nodes();
  uint64_t tag = 1;
  for (size_t bytes : {size_t{0}, size_t{5}, (size_t{1} << 20) + 3, size_t{64} << 20}) {
    for (int root = 0; root < n; ++root) {
      SCOPED_TRACE(absl::StrFormat("root %d, %d bytes", root, bytes));
      std::vector<std::vector<std::byte>> bufs;
      for (int i = 0; i < n; ++i) {
        bufs.push_back(std::vector<std::byte>(bytes, std::byte(i)));
      }
      for (size_t k = 0; k < bytes; k += 4093) {
        bufs[root][k] = std::byte(k * 13 + 5);
      }
      const std::vector<std::byte> want = bufs[root];
      const absl::Time deadline = absl::Now() + absl::Seconds(120);
      std::vector<absl::Status> results = RunOnNodes(n, [&](int i) {
        return TreeBroadcast(c.node(i), bufs[i].data(), bytes, root, (tag) << 24, deadline);
      });
      ++tag;
      for (int i = 0; i < n; ++i) {
        ASSERT_TRUE(results[i].ok()) << "node " << i << ": " << results[i];
        ASSERT_TRUE(bufs[i] == want) << "node " << i << " differs";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Nodes, UcxCollectivesTest, testing::Values(2, 3));

// Forwards to a transport and signals once it has posted `sends` sends.
class SendCounter final : public Transport {
 public:
  SendCounter(Transport& inner, int sends) : inner_(inner), left_(sends) {}
  int node() const override { return inner_.node(); }
  int nodes() const override { return inner_.nodes(); }
  absl::StatusOr<Ticket> PostSend(int peer, uint64_t tag, const void* data, size_t bytes) override {
    auto t = inner_.PostSend(peer, tag, data, bytes);
    if (--left_ == 0) reached_.Notify();
    return t;
  }
  absl::StatusOr<Ticket> PostRecv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return inner_.PostRecv(peer, tag, data, bytes);
  }
  absl::Status Wait(absl::Span<const Ticket> tickets, absl::Time deadline) override {
    return inner_.Wait(tickets, deadline);
  }
  void Abort(const absl::Status& why) override { inner_.Abort(why); }
  absl::Notification& reached() { return reached_; }

 private:
  Transport& inner_;
  int left_;  // used by the one thread running the collective
  absl::Notification reached_;
};

// Node 2 dies (aborts and destroys its transport) in the middle of a 64 MiB
// allreduce; nodes 0 and 1 fail promptly, long before the deadline.
TEST(UcxCollectivesFaultTest, PeerDestroyedMidTransferFailsTheOthers) {
  UcxLoopbackCluster c = MakeCluster(3);
  constexpr size_t kCount = size_t{16} << 20;  // float32: 64 MiB
  std::vector<std::vector<std::byte>> bufs;
  for (int i = 0; i < 3; ++i) {
    bufs.push_back(TestData(DType::kFloat32, ReduceOp::kSum, i, kCount));
  }
  SendCounter doomed(c.node(2), /*sends=*/8);
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + absl::Seconds(60);
  absl::Status results[3];
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      Transport& t = i == 2 ? static_cast<Transport&>(doomed) : c.node(i);
      results[i] = Allreduce(t, bufs[i].data(), kCount, DType::kFloat32, ReduceOp::kSum,
                             uint64_t{1} << 24, deadline);
    });
  }
  ASSERT_TRUE(doomed.reached().WaitForNotificationWithDeadline(deadline));
  c.node(2).Abort(absl::AbortedError("node 2 crashed"));
  threads[2].join();
  c.Destroy(2);
  threads[0].join();
  threads[1].join();
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(results[2].code(), absl::StatusCode::kAborted) << results[2];
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(results[i].ok()) << "node " << i;
    EXPECT_EQ(results[i].code(), absl::StatusCode::kAborted) << results[i];
  }
  EXPECT_LT(took, absl::Seconds(20));
}

}  // namespace
}  // namespace kolo::daemon
