#include "daemon/transport/ucx_transport.h"

#include <time.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/link_lost.h"
#include "common/testing/wait_until.h"
#include "daemon/transport/ucx_loopback_cluster.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

absl::Time Later() { return absl::Now() + absl::Seconds(30); }

UcxLoopbackCluster MakeCluster(int n) {
  absl::StatusOr<UcxLoopbackCluster> c = UcxLoopbackCluster::Create(n);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

// Sends `out` from a to b under `tag` and checks it arrives intact.
void PingOnce(Transport& a, Transport& b, uint64_t tag, const std::vector<char>& out) {
  std::vector<char> in(out.size(), 0);
  auto r = b.PostRecv(a.node(), tag, in.data(), in.size());
  auto s = a.PostSend(b.node(), tag, out.data(), out.size());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(a.Wait({*s}, Later()).ok());
  ASSERT_TRUE(b.Wait({*r}, Later()).ok());
  EXPECT_TRUE(in == out);
}

TEST(UcxTransportTest, MovesZeroSmallAndLargeMessages) {
  UcxLoopbackCluster c = MakeCluster(2);
  EXPECT_EQ(c.node(1).node(), 1);
  EXPECT_EQ(c.node(1).nodes(), 2);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, size_t{8} << 20}) {
    std::vector<char> out(bytes);
    for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<char>(i * 7 + 1);
    PingOnce(c.node(0), c.node(1), 1, out);
    PingOnce(c.node(1), c.node(0), 2, out);
  }
  // Zero bytes with null pointers.
  auto r = c.node(1).PostRecv(0, 3, nullptr, 0);
  auto s = c.node(0).PostSend(1, 3, nullptr, 0);
  ASSERT_TRUE(r.ok() && s.ok());
  EXPECT_TRUE(c.node(0).Wait({*s}, Later()).ok());
  EXPECT_TRUE(c.node(1).Wait({*r}, Later()).ok());
}

TEST(UcxTransportTest, MatchesOnPeerAndTag) {
  UcxLoopbackCluster c = MakeCluster(3);
  // Nodes 0 and 2 send to node 1 under the same tag; node 1 tells them apart.
  char from0[8] = {}, from2[8] = {}, other_tag[8] = {};
  auto r2 = c.node(1).PostRecv(2, 9, from2, 8);
  auto rt = c.node(1).PostRecv(0, 10, other_tag, 8);
  auto r0 = c.node(1).PostRecv(0, 9, from0, 8);
  const char zero9[8] = "zero-9", zero10[8] = "zero-10", two9[8] = "two-9";
  auto s0 = c.node(0).PostSend(1, 9, zero9, 8);
  auto s0t = c.node(0).PostSend(1, 10, zero10, 8);
  auto s2 = c.node(2).PostSend(1, 9, two9, 8);
  ASSERT_TRUE(r0.ok() && r2.ok() && rt.ok() && s0.ok() && s0t.ok() && s2.ok());
  EXPECT_TRUE(c.node(1).Wait({*r0, *r2, *rt}, Later()).ok());
  EXPECT_TRUE(c.node(0).Wait({*s0, *s0t}, Later()).ok());
  EXPECT_TRUE(c.node(2).Wait({*s2}, Later()).ok());
  EXPECT_STREQ(from0, "zero-9");
  EXPECT_STREQ(from2, "two-9");
  EXPECT_STREQ(other_tag, "zero-10");
}

// What one node's lane handler received: (sender, message) in order.
struct Inbox {
  absl::Mutex mu;
  std::vector<std::pair<int, std::string>> got ABSL_GUARDED_BY(mu);
  MessageLane::Handler Handler() {
    return [this](int peer, absl::string_view m) {
      absl::MutexLock l(&mu);
      got.emplace_back(peer, std::string(m));
    };
  }
  bool WaitFor(size_t n) {
    absl::MutexLock l(&mu);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return got.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30));
  }
};

TEST(UcxTransportTest, LaneMessagesArriveWholeInOrderNamingTheirSender) {
  Inbox at1, at2;
  absl::StatusOr<UcxLoopbackCluster> c =
      UcxLoopbackCluster::Create(3, UcxOptions(), {nullptr, at1.Handler(), at2.Handler()});
  ASSERT_TRUE(c.ok()) << c.status();
  MessageLane* lane0 = c->node(0).message_lane();
  ASSERT_NE(lane0, nullptr);
  constexpr int kMessages = 200;
  std::vector<std::string> sent;
  for (int i = 0; i < kMessages; ++i) {
    // Sizes from empty to the largest a lane takes.
    const size_t bytes = i == kMessages - 1 ? lane0->max_message_bytes() : (i * 997) % 5000;
    std::string m(bytes, ' ');
    for (size_t j = 0; j < bytes; ++j) m[j] = static_cast<char>(i + j * 13);
    sent.push_back(m);
    ASSERT_TRUE(lane0->SendMessage(1, std::make_shared<std::string>(m)).ok());
  }
  ASSERT_TRUE(c->node(2).SendMessage(1, std::make_shared<std::string>("from two")).ok());
  ASSERT_TRUE(at1.WaitFor(kMessages + 1));
  absl::MutexLock l(&at1.mu);
  std::vector<std::string> from0;
  for (const auto& [peer, m] : at1.got) {
    if (peer == 0) from0.push_back(m);
    if (peer == 2) {
      EXPECT_EQ(m, "from two");
    }
  }
  EXPECT_TRUE(from0 == sent) << "lane messages from node 0 were changed or reordered";
  absl::MutexLock l2(&at2.mu);
  EXPECT_TRUE(at2.got.empty());
}

TEST(UcxTransportTest, LaneRefusesWhatItCannotCarry) {
  UcxLoopbackCluster c = MakeCluster(2);
  MessageLane* lane = c.node(0).message_lane();
  auto big = std::make_shared<std::string>(lane->max_message_bytes() + 1, 'x');
  EXPECT_EQ(lane->SendMessage(1, big).code(), absl::StatusCode::kInvalidArgument);
  auto one = std::make_shared<std::string>("x");
  EXPECT_EQ(lane->SendMessage(0, one).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lane->SendMessage(9, one).code(), absl::StatusCode::kInvalidArgument);
  // A node with no handler drops what arrives and goes on moving data.
  ASSERT_TRUE(lane->SendMessage(1, one).ok());
  PingOnce(c.node(0), c.node(1), 4, std::vector<char>(64, 'p'));
  c.node(0).Abort(absl::UnavailableError("gone"));
  EXPECT_EQ(lane->SendMessage(1, one).code(), absl::StatusCode::kAborted);
}

TEST(UcxTransportTest, RejectsBadArguments) {
  UcxLoopbackCluster c = MakeCluster(2);
  char b = 0;
  EXPECT_EQ(c.node(0).PostSend(0, 1, &b, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.node(0).PostSend(5, 1, &b, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.node(0).PostRecv(1, kTransportTagLimit, &b, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.node(0).PostRecv(1, 1, nullptr, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.node(0).Wait({77}, Later()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.node(0).Connect({"a", "b"}, 0).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(UcxTransportTest, SizeMismatchFailsTheReceive) {
  UcxLoopbackCluster c = MakeCluster(2);
  char big[16] = "0123456789", small[4];
  // Larger than expected: UCX truncates.
  auto r = c.node(1).PostRecv(0, 1, small, 4);
  auto s = c.node(0).PostSend(1, 1, big, 16);
  EXPECT_EQ(c.node(1).Wait({*r}, Later()).code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(c.node(0).Wait({*s}, Later()).ok());
  // Smaller than expected.
  r = c.node(1).PostRecv(0, 2, big, 16);
  s = c.node(0).PostSend(1, 2, small, 4);
  EXPECT_EQ(c.node(1).Wait({*r}, Later()).code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(c.node(0).Wait({*s}, Later()).ok());
}

TEST(UcxTransportTest, ReceiveDeadlineCancelsAndTheLinkStaysUsable) {
  UcxLoopbackCluster c = MakeCluster(2);
  char b[8];
  auto r = c.node(0).PostRecv(1, 4, b, 8);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(c.node(0).Wait({*r}, absl::Now() + absl::Milliseconds(50)).code(),
            absl::StatusCode::kDeadlineExceeded);
  PingOnce(c.node(1), c.node(0), 4, std::vector<char>(8, 'k'));
}

TEST(UcxTransportTest, AbortFailsPendingAndFutureTransfers) {
  UcxLoopbackCluster c = MakeCluster(2);
  std::vector<char> b(1 << 20);
  auto r = c.node(0).PostRecv(1, 4, b.data(), b.size());
  // A large send no one receives stays pending (rendezvous).
  auto s = c.node(0).PostSend(1, 5, b.data(), b.size());
  ASSERT_TRUE(r.ok() && s.ok());
  absl::Status waited;
  std::thread waiter([&] { waited = c.node(0).Wait({*r, *s}, absl::Now() + absl::Seconds(60)); });
  c.node(0).Abort(absl::UnavailableError("node 1 went away"));
  waiter.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kAborted) << waited;
  EXPECT_NE(waited.message().find("node 1 went away"), std::string::npos);
  EXPECT_EQ(c.node(0).PostSend(1, 1, b.data(), 1).status().code(), absl::StatusCode::kAborted);
}

TEST(UcxTransportTest, AStalledLinkAbortsNamingThePeerLongBeforeTheDeadline) {
  // Node 1 is alive (its worker progresses) but never takes part: node 0's
  // receive and its large send (rendezvous) stay in flight with nothing
  // completing, as when the data link stalls while heartbeats go on.
  UcxOptions options;
  options.stall_timeout = absl::Milliseconds(300);
  absl::StatusOr<UcxLoopbackCluster> c = UcxLoopbackCluster::Create(2, options);
  ASSERT_TRUE(c.ok()) << c.status();
  PingOnce(c->node(0), c->node(1), 1, std::vector<char>(64, 'x'));
  std::vector<char> b(4 << 20);
  auto r = c->node(0).PostRecv(1, 4, b.data(), 8);
  auto s = c->node(0).PostSend(1, 5, b.data(), b.size());
  ASSERT_TRUE(r.ok() && s.ok());
  const absl::Time start = absl::Now();
  absl::Status waited = c->node(0).Wait({*r, *s}, start + absl::Minutes(5));
  EXPECT_LT(absl::Now() - start, absl::Minutes(1));  // the watch, not the deadline
  EXPECT_EQ(waited.code(), absl::StatusCode::kAborted) << waited;
  EXPECT_NE(waited.message().find("data link stalled"), std::string::npos) << waited;
  EXPECT_TRUE(IsLinkLost(waited)) << "a stalled link is a lost one: " << waited;
  EXPECT_EQ(c->node(0).PostSend(1, 1, b.data(), 1).status().code(), absl::StatusCode::kAborted);
}

TEST(UcxTransportTest, AnIdleLinkIsNotAStalledOne) {
  UcxOptions options;
  options.stall_timeout = absl::Milliseconds(50);
  absl::StatusOr<UcxLoopbackCluster> c = UcxLoopbackCluster::Create(2, options);
  ASSERT_TRUE(c.ok()) << c.status();
  PingOnce(c->node(0), c->node(1), 1, std::vector<char>(64, 'x'));
  // Nothing in flight for several stall timeouts: the watch has nothing to
  // time, and the link still works.
  // Not a wait: idle time must pass, and any probe would put a transfer in flight.
  absl::SleepFor(absl::Milliseconds(200));
  PingOnce(c->node(1), c->node(0), 2, std::vector<char>(64, 'y'));
}

TEST(UcxTransportTest, TransfersUcxDoesNotReleaseShutTheTransportDownNotTheProcess) {
  // With no grace at all the Wait does not wait for the withdrawn transfers
  // to be released (the progress thread cannot take the cancellations while
  // the Wait holds the lock): the path taken when UCX keeps a buffer. The worker goes, the Wait
  // returns, and the transport stays aborted.
  UcxOptions options;
  options.retire_grace = absl::ZeroDuration();
  absl::StatusOr<UcxLoopbackCluster> c = UcxLoopbackCluster::Create(2, options);
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<char> b(1 << 20);
  auto r = c->node(0).PostRecv(1, 4, b.data(), b.size());
  auto s = c->node(0).PostSend(1, 5, b.data(), b.size());
  ASSERT_TRUE(r.ok() && s.ok());
  absl::Status waited = c->node(0).Wait({*r, *s}, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(waited.code(), absl::StatusCode::kAborted) << waited;
  EXPECT_NE(waited.message().find("shut down"), std::string::npos) << waited;
  absl::StatusOr<Transport::Ticket> later = c->node(0).PostRecv(1, 6, b.data(), 8);
  EXPECT_EQ(later.status().code(), absl::StatusCode::kAborted);
  // The other node carries on with its own worker.
  EXPECT_EQ(c->node(1).nodes(), 2);
}

TEST(UcxTransportTest, DestroyedPeerFailsTransfersWithIt) {
  UcxLoopbackCluster c = MakeCluster(3);
  // Make sure the links are up before the crash.
  PingOnce(c.node(2), c.node(0), 1, std::vector<char>(64, 'x'));
  PingOnce(c.node(2), c.node(1), 1, std::vector<char>(64, 'x'));
  std::vector<char> b(1 << 20);
  auto r = c.node(0).PostRecv(2, 7, b.data(), b.size());
  ASSERT_TRUE(r.ok());
  const absl::Time start = absl::Now();
  c.node(2).Abort(absl::AbortedError("node 2 crashes"));
  c.Destroy(2);
  absl::Status s = c.node(0).Wait({*r}, start + absl::Seconds(20));
  EXPECT_FALSE(s.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(25));
  // Normally the endpoint error handler names node 2 well before the deadline.
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("node 2"), std::string::npos) << s;
}

TEST(UcxTransportTest, APeerThatFinishedAndClosedLeavesItsLastMessages) {
  // Node 1 sends its last (eager) message and closes cleanly before node 0
  // has posted the receive: once node 0 has seen the link go, the receive
  // still gets the message, and node 0 goes on talking to node 2.
  UcxLoopbackCluster c = MakeCluster(3);
  PingOnce(c.node(1), c.node(0), 1, std::vector<char>(64, 'x'));
  PingOnce(c.node(2), c.node(0), 1, std::vector<char>(64, 'x'));
  std::vector<char> last(256);
  for (size_t i = 0; i < last.size(); ++i) last[i] = static_cast<char>(i * 3 + 1);
  auto s = c.node(1).PostSend(0, 5, last.data(), last.size());
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(c.node(1).Wait({*s}, Later()).ok());
  c.Destroy(1);
  // Node 0 learns that the link is gone: a send to node 1 fails.
  absl::Status posted;
  absl::Status to_gone;
  char byte = 0;
  const bool gone = WaitUntil(
      [&] {
        auto t = c.node(0).PostSend(1, 6, &byte, 1);
        posted = t.status();
        if (!t.ok()) return true;
        to_gone = c.node(0).Wait({*t}, absl::Now() + absl::Seconds(5));
        return !to_gone.ok();
      },
      absl::Seconds(20), absl::Milliseconds(20));
  ASSERT_TRUE(posted.ok()) << posted;
  ASSERT_TRUE(gone) << "node 0 never saw node 1 go";
  EXPECT_NE(to_gone.message().find("node 1"), std::string::npos) << to_gone;
  std::vector<char> in(last.size(), 0);
  auto r = c.node(0).PostRecv(1, 5, in.data(), in.size());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(c.node(0).Wait({*r}, Later()).ok());
  EXPECT_TRUE(in == last);
  // A receive for what node 1 never sent fails at once, naming it.
  auto never = c.node(0).PostRecv(1, 7, in.data(), in.size());
  ASSERT_TRUE(never.ok());
  absl::Status none = c.node(0).Wait({*never}, absl::Now() + absl::Seconds(20));
  EXPECT_EQ(none.code(), absl::StatusCode::kAborted) << none;
  EXPECT_NE(none.message().find("node 1"), std::string::npos) << none;
  PingOnce(c.node(2), c.node(0), 8, std::vector<char>(1 << 20, 'y'));
  PingOnce(c.node(0), c.node(2), 9, std::vector<char>(64, 'z'));
}

TEST(UcxTransportTest, IdleCostsNoCpu) {
  UcxLoopbackCluster c = MakeCluster(2);
  PingOnce(c.node(0), c.node(1), 1, std::vector<char>(64, 'x'));
  auto cpu = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return absl::DurationFromTimespec(ts);
  };
  // A measurement, not synchronisation: idle progress threads must sleep, so
  // the process must not spend 100 ms of CPU in half a second (polled
  // sparsely, so the watching itself costs next to nothing).
  const absl::Duration before = cpu();
  EXPECT_TRUE(StaysFalse([&] { return cpu() - before >= absl::Milliseconds(100); },
                         absl::Milliseconds(500), absl::Milliseconds(10)))
      << cpu() - before;
}

}  // namespace
}  // namespace kolo::daemon
