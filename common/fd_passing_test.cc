#include "common/fd_passing.h"

#include <sys/socket.h>
#include <unistd.h>

#include "common/handoff.h"
#include "common/shared_segment.h"
#include "gtest/gtest.h"

namespace kolo {
namespace {

struct Pair {
  UniqueFd a, b;
};

Pair SeqPacketPair() {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
  return Pair{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

TEST(FdPassingTest, CredentialsAreThisProcess) {
  Pair p = SeqPacketPair();
  auto cred = CredentialsOf(p.b.get());
  ASSERT_TRUE(cred.ok()) << cred.status();
  EXPECT_EQ(cred->pid, getpid());
  EXPECT_EQ(cred->uid, getuid());
  EXPECT_EQ(cred->gid, getgid());
}

TEST(FdPassingTest, DescriptorTravelsWithTheMessage) {
  Pair p = SeqPacketPair();
  auto seg = SharedSegment::Create(1 << 16);
  ASSERT_TRUE(seg.ok());
  seg->data()[10] = 42;
  ASSERT_TRUE(SendWithFd(p.a.get(), kHandoffRequest, seg->fd()).ok());
  auto got = ReceiveWithFd(p.b.get(), 64);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->bytes, kHandoffRequest);
  ASSERT_TRUE(got->fd.valid());
  auto adopted = SharedSegment::Adopt(std::move(got->fd), 1 << 16);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_EQ(adopted->data()[10], 42);
}

TEST(FdPassingTest, MessageWithoutDescriptorAndTooLongMessage) {
  Pair p = SeqPacketPair();
  ASSERT_TRUE(SendWithFd(p.a.get(), "hello", -1).ok());
  auto got = ReceiveWithFd(p.b.get(), 64);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->fd.valid());
  ASSERT_TRUE(SendWithFd(p.a.get(), std::string(100, 'x'), -1).ok());
  EXPECT_EQ(ReceiveWithFd(p.b.get(), 64).status().code(), absl::StatusCode::kInvalidArgument);
  // Nothing waiting: an error at once, never a block.
  EXPECT_FALSE(ReceiveWithFd(p.b.get(), 64).ok());
  p.a.Reset();
  auto eof = ReceiveWithFd(p.b.get(), 64);
  ASSERT_TRUE(eof.ok());
  EXPECT_TRUE(eof->bytes.empty());
}

TEST(HandoffReplyTest, RoundTrips) {
  const std::string ticket(kHandoffTicketChars, 'a');
  auto ok = ParseHandoffReply(HandoffOkReply(ticket));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, ticket);
  auto err = ParseHandoffReply(HandoffErrorReply(absl::ResourceExhaustedError("too many")));
  EXPECT_EQ(err.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(err.status().message(), "too many");
  EXPECT_EQ(ParseHandoffReply("OK short").status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(ParseHandoffReply("ERR 99 x").status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(ParseHandoffReply("").status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace kolo
