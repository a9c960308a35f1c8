#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/handoff.h"
#include "common/shared_segment.h"
#include "common/short_temp_dir.h"
#include "common/testing/wait_until.h"
#include "daemon/session/handoff_server.h"
#include "daemon/session/handoff_table.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

std::string TempSocket() {
  // Under /tmp: socket paths must stay under 108 bytes.
  std::string dir = MakeShortTempDir("kolo-handoff");
  EXPECT_FALSE(dir.empty());
  return dir + "/k.sock.handoff";
}

TEST(HandoffTableTest, TicketIsOneTimeAndExpires) {
  HandoffTable table(HandoffLimits{absl::Seconds(5), 10, 10});
  const absl::Time t0 = absl::Now();
  Handoff h;
  h.caller = ProcessCredentials{getpid(), 1000, 1000};
  auto ticket = table.Deposit(std::move(h), t0);
  ASSERT_TRUE(ticket.ok());
  EXPECT_EQ(ticket->size(), kHandoffTicketChars);
  auto got = table.Redeem(*ticket, t0);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->caller.uid, 1000u);
  EXPECT_EQ(table.Redeem(*ticket, t0).status().code(), absl::StatusCode::kPermissionDenied);
  auto late = table.Deposit(Handoff{}, t0);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(table.Redeem(*late, t0 + absl::Seconds(6)).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(table.waiting(), 0);
}

// Whether the other end of connected socket `fd` has closed it (the kernel
// reports a hang-up once the peer is gone).
bool HungUp(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLHUP) != 0;
}

// An identity-only handoff of `uid`, deposited now.
absl::StatusCode DepositAs(HandoffTable& table, uid_t uid, absl::Time now) {
  Handoff h;
  h.caller.uid = uid;
  return table.Deposit(std::move(h), now).status().code();
}

TEST(HandoffTableTest, BoundedPerUidAndInTotal) {
  HandoffTable table(HandoffLimits{absl::Seconds(30), 5, 3});
  const absl::Time now = absl::Now();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(DepositAs(table, 7, now), absl::StatusCode::kOk);
  EXPECT_EQ(DepositAs(table, 7, now), absl::StatusCode::kResourceExhausted);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(DepositAs(table, 8, now), absl::StatusCode::kOk);
  EXPECT_EQ(DepositAs(table, 9, now), absl::StatusCode::kResourceExhausted);
}

TEST(HandoffServerTest, SegmentAndIdentityComeFromTheKernel) {
  HandoffTable table(HandoffLimits{});
  HandoffServerOptions options;
  options.path = TempSocket();
  auto server = HandoffServer::Start(options, &table);
  ASSERT_TRUE(server.ok()) << server.status();
  auto seg = SharedSegment::Create(1 << 16);
  ASSERT_TRUE(seg.ok());
  auto ticket = HandOff(options.path, seg->fd(), absl::Seconds(5));
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  auto got = table.Redeem(*ticket, absl::Now());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->caller.pid, getpid());
  EXPECT_EQ(got->caller.uid, getuid());
  EXPECT_EQ(got->segment_bytes, uint64_t{1} << 16);
  ASSERT_TRUE(got->segment.valid());
  // An identity-only ticket.
  auto identity = HandOff(options.path, -1, absl::Seconds(5));
  ASSERT_TRUE(identity.ok()) << identity.status();
  auto who = table.Redeem(*identity, absl::Now());
  ASSERT_TRUE(who.ok());
  EXPECT_FALSE(who->segment.valid());
}

TEST(HandoffServerTest, PipeTerminalAndUnsealedFileAreRefusedAndServingGoesOn) {
  HandoffTable table(HandoffLimits{});
  HandoffServerOptions options;
  options.path = TempSocket();
  auto server = HandoffServer::Start(options, &table);
  ASSERT_TRUE(server.ok()) << server.status();
  int fifo[2];
  ASSERT_EQ(pipe(fifo), 0);
  EXPECT_EQ(HandOff(options.path, fifo[0], absl::Seconds(5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  close(fifo[0]);
  close(fifo[1]);
  int master = -1, slave = -1;
  ASSERT_EQ(openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  EXPECT_EQ(HandOff(options.path, slave, absl::Seconds(5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  close(master);
  close(slave);
  UniqueFd file(open("/proc/self/exe", O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(HandOff(options.path, file.get(), absl::Seconds(5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.waiting(), 0);
  auto seg = SharedSegment::Create(1 << 16);
  ASSERT_TRUE(seg.ok());
  EXPECT_TRUE(HandOff(options.path, seg->fd(), absl::Seconds(5)).ok());
}

TEST(HandoffServerTest, IdleAndGarbageConnectionsDoNotBlockOthers) {
  HandoffTable table(HandoffLimits{});
  HandoffServerOptions options;
  options.path = TempSocket();
  options.handshake_timeout = absl::Milliseconds(300);
  options.max_connections = 8;
  auto server = HandoffServer::Start(options, &table);
  ASSERT_TRUE(server.ok()) << server.status();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, options.path.data(), options.path.size());
  // A garbage request gets an error.
  {
    UniqueFd s(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    ASSERT_EQ(connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(send(s.get(), "hello", 5, 0), 5);
    char buf[600];
    ssize_t n = recv(s.get(), buf, sizeof(buf), 0);
    ASSERT_GT(n, 0);
    EXPECT_EQ(ParseHandoffReply(std::string(buf, n)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // More idle connections than the server keeps open.
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 20; ++i) {
    UniqueFd s(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    ASSERT_EQ(connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(std::move(s));
  }
  // Once the idle ones time out (the server has closed every one of them:
  // those over the cap at once, the rest at their handshake deadline), a
  // real client is served.
  EXPECT_TRUE(WaitUntil(
      [&] {
        for (const UniqueFd& s : idle) {
          if (!HungUp(s.get())) return false;
        }
        return true;
      },
      absl::Seconds(20)));
  auto seg = SharedSegment::Create(1 << 16);
  ASSERT_TRUE(seg.ok());
  auto ticket = HandOff(options.path, seg->fd(), absl::Seconds(5));
  EXPECT_TRUE(ticket.ok()) << ticket.status();
}

// A connection to `path`, made and left idle.
UniqueFd ConnectIdle(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  UniqueFd s(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  EXPECT_EQ(connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return s;
}

// The reply that kolod sent on `fd` before it closed it, or "" when it is
// still open (or closed without one).
std::string ReplyBeforeClose(int fd) {
  if (!HungUp(fd)) return "";
  char buf[kMaxHandoffMessageBytes];
  ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  return n > 0 ? std::string(buf, n) : "";
}

TEST(HandoffServerTest, AConnectionOverItsUidsShareIsClosedAtOnce) {
  HandoffTable table(HandoffLimits{});
  HandoffServerOptions options;
  options.path = TempSocket();
  options.handshake_timeout = absl::Seconds(60);
  options.max_connections = 8;
  options.max_connections_per_uid = 2;
  auto server = HandoffServer::Start(options, &table);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 2; ++i) idle.push_back(ConnectIdle(options.path));
  UniqueFd over = ConnectIdle(options.path);
  std::string reply;
  // Closed long before its handshake deadline, with the reason.
  ASSERT_TRUE(WaitUntil(
      [&] {
        reply = ReplyBeforeClose(over.get());
        return !reply.empty();
      },
      absl::Seconds(20)));
  absl::Status refused = ParseHandoffReply(reply).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "its whole share")) << refused;
  for (const UniqueFd& s : idle) EXPECT_FALSE(HungUp(s.get()));
  // The client gives up after its retries, naming the socket.
  auto ticket = HandOff(options.path, -1, absl::Milliseconds(300));
  EXPECT_EQ(ticket.status().code(), absl::StatusCode::kResourceExhausted) << ticket.status();
  EXPECT_TRUE(absl::StrContains(ticket.status().message(), options.path)) << ticket.status();
  // Once one of the uid's connections goes, its share has room again.
  idle.pop_back();
  EXPECT_TRUE(HandOff(options.path, -1, absl::Seconds(5)).ok());
}

TEST(HandoffServerTest, TheClientRetriesARefusedHandoff) {
  HandoffTable table(HandoffLimits{});
  HandoffServerOptions options;
  options.path = TempSocket();
  // The idle connections that fill this uid's share expire well within the
  // client's retries.
  options.handshake_timeout = absl::Milliseconds(500);
  options.max_connections_per_uid = 2;
  auto server = HandoffServer::Start(options, &table);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 2; ++i) idle.push_back(ConnectIdle(options.path));
  // Refused (the share is full) until the idle ones expire.
  UniqueFd probe = ConnectIdle(options.path);
  ASSERT_TRUE(WaitUntil([&] { return HungUp(probe.get()); }, absl::Seconds(20)));
  auto seg = SharedSegment::Create(1 << 16);
  ASSERT_TRUE(seg.ok());
  auto ticket = HandOff(options.path, seg->fd(), absl::Seconds(10));
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  EXPECT_TRUE(table.Redeem(*ticket, absl::Now()).ok());
  for (const UniqueFd& s : idle) EXPECT_TRUE(HungUp(s.get()));
}

TEST(HandoffClientTest, NoKolodFailsAtOnceNamingTheSocket) {
  const std::string path = TempSocket();
  auto ticket = HandOff(path, -1, absl::Seconds(30));
  EXPECT_EQ(ticket.status().code(), absl::StatusCode::kNotFound) << ticket.status();
  EXPECT_TRUE(absl::StrContains(ticket.status().message(), path)) << ticket.status();
}

}  // namespace
}  // namespace kolo::daemon
