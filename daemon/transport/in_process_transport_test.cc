#include "daemon/transport/in_process_transport.h"

#include <cstring>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

absl::Time Later() { return absl::Now() + absl::Seconds(30); }

TEST(InProcessFabricTest, MovesBytesAndMatchesOnPeerAndTagInOrder) {
  InProcessFabric fabric(3);
  Transport& a = fabric.endpoint(0);
  Transport& b = fabric.endpoint(1);
  Transport& c = fabric.endpoint(2);
  EXPECT_EQ(b.node(), 1);
  EXPECT_EQ(b.nodes(), 3);
  char from_a1[4] = {}, from_a2[4] = {}, from_c[4] = {};
  auto r1 = b.PostRecv(0, 5, from_a1, 4);
  auto r2 = b.PostRecv(0, 5, from_a2, 4);
  auto r3 = b.PostRecv(2, 5, from_c, 4);
  ASSERT_TRUE(r1.ok() && r2.ok() && r3.ok());
  const char ccc[4] = "ccc", aa1[4] = "aa1", aa2[4] = "aa2";
  auto s3 = c.PostSend(1, 5, ccc, 4);
  auto s1 = a.PostSend(1, 5, aa1, 4);
  auto s2 = a.PostSend(1, 5, aa2, 4);
  ASSERT_TRUE(s1.ok() && s2.ok() && s3.ok());
  EXPECT_TRUE(a.Wait({*s1, *s2}, Later()).ok());
  EXPECT_TRUE(c.Wait({*s3}, Later()).ok());
  EXPECT_TRUE(b.Wait({*r1, *r2, *r3}, Later()).ok());
  EXPECT_STREQ(from_a1, "aa1");
  EXPECT_STREQ(from_a2, "aa2");
  EXPECT_STREQ(from_c, "ccc");
  EXPECT_EQ(fabric.outstanding(), 0u);
}

TEST(InProcessFabricTest, ZeroBytesAndSizeMismatch) {
  InProcessFabric fabric(2);
  auto s = fabric.endpoint(0).PostSend(1, 1, nullptr, 0);
  auto r = fabric.endpoint(1).PostRecv(0, 1, nullptr, 0);
  ASSERT_TRUE(s.ok() && r.ok());
  EXPECT_TRUE(fabric.endpoint(0).Wait({*s}, Later()).ok());
  EXPECT_TRUE(fabric.endpoint(1).Wait({*r}, Later()).ok());

  char buf[8];
  s = fabric.endpoint(0).PostSend(1, 2, "abc", 3);
  r = fabric.endpoint(1).PostRecv(0, 2, buf, 8);
  EXPECT_EQ(fabric.endpoint(1).Wait({*r}, Later()).code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(fabric.endpoint(0).Wait({*s}, Later()).ok());
}

TEST(InProcessFabricTest, RejectsBadPeerTagAndTicket) {
  InProcessFabric fabric(2);
  char b = 0;
  EXPECT_EQ(fabric.endpoint(0).PostSend(0, 1, &b, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fabric.endpoint(0).PostSend(2, 1, &b, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fabric.endpoint(0).PostSend(1, kTransportTagLimit, &b, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fabric.endpoint(0).Wait({42}, Later()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(InProcessFabricTest, DeadlineCancelsAndRetires) {
  InProcessFabric fabric(2);
  char b[4];
  auto r = fabric.endpoint(0).PostRecv(1, 9, b, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(fabric.endpoint(0).Wait({*r}, absl::Now() + absl::Milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(fabric.outstanding(), 0u);
  // The cancelled receive no longer matches: this send waits for a new one.
  auto s = fabric.endpoint(1).PostSend(0, 9, "xyz", 4);
  auto r2 = fabric.endpoint(0).PostRecv(1, 9, b, 4);
  EXPECT_TRUE(fabric.endpoint(0).Wait({*r2}, Later()).ok());
  EXPECT_TRUE(fabric.endpoint(1).Wait({*s}, Later()).ok());
  EXPECT_STREQ(b, "xyz");
}

TEST(InProcessFabricTest, AbortFailsPendingAndFutureTransfers) {
  InProcessFabric fabric(2);
  char b[4];
  auto r = fabric.endpoint(0).PostRecv(1, 9, b, 4);
  ASSERT_TRUE(r.ok());
  absl::Status waited;
  std::thread waiter([&] { waited = fabric.endpoint(0).Wait({*r}, absl::InfiniteFuture()); });
  const int node0[] = {0};
  ASSERT_TRUE(fabric.AwaitInFlight(node0, Later()));
  fabric.endpoint(0).Abort(absl::UnavailableError("node 1 is gone"));
  waiter.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kAborted);
  EXPECT_NE(waited.message().find("node 1 is gone"), std::string::npos);
  EXPECT_EQ(fabric.endpoint(0).PostSend(1, 1, b, 4).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(fabric.outstanding(), 0u);
}

}  // namespace
}  // namespace kolo::daemon
