#include "client/kolorun/output_pump.h"

#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace kolo::kolorun {
namespace {

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  off_t offset = 0;
  ssize_t n;
  while ((n = ::pread(fd, buf, sizeof(buf), offset)) > 0) {
    out.append(buf, static_cast<size_t>(n));
    offset += n;
  }
  return out;
}

TEST(OutputPumpTest, PrefixesLinesPerOwnerAndDropsClosedStreams) {
  UniqueFd dest(::memfd_create("pump_test", MFD_CLOEXEC));
  absl::StatusOr<Pipe> a = MakePipe(/*nonblocking_read=*/true);
  absl::StatusOr<Pipe> b = MakePipe(/*nonblocking_read=*/true);
  ASSERT_TRUE(a.ok() && b.ok());
  OutputPump pump;
  pump.Add(0, std::move(a->read_end), "[0] ", dest.get());
  pump.Add(OutputPump::kDiscoveryOwner, std::move(b->read_end), "[discovery] ", dest.get());
  ASSERT_EQ(::write(a->write_end.get(), "one\ntw", 6), 6);
  pump.DrainNow(0);
  EXPECT_EQ(ReadAll(dest.get()), "[0] one\n");
  EXPECT_TRUE(pump.AnyRankStreamOpen());

  a->write_end.Reset();
  pump.DrainNow(0);  // EOF: the partial line is flushed and the stream closed.
  EXPECT_EQ(ReadAll(dest.get()), "[0] one\n[0] tw\n");
  EXPECT_FALSE(pump.AnyRankStreamOpen());  // The discovery stream is no rank's.
  EXPECT_EQ(pump.size(), 2u);
  pump.DropClosed();
  ASSERT_EQ(pump.size(), 1u);

  ASSERT_EQ(::write(b->write_end.get(), "warn\n", 5), 5);
  pump.Read(0);
  EXPECT_EQ(ReadAll(dest.get()), "[0] one\n[0] tw\n[discovery] warn\n");
  pump.Close(OutputPump::kDiscoveryOwner);
  EXPECT_EQ(pump.fd(0), -1);
}

TEST(OutputPumpTest, CopiesUnprefixedOutputToTheCopyFd) {
  UniqueFd dest(::memfd_create("pump_test", MFD_CLOEXEC));
  UniqueFd copy(::memfd_create("pump_copy", MFD_CLOEXEC));
  const int copy_fd = copy.get();
  UniqueFd reader(::dup(copy_fd));
  absl::StatusOr<Pipe> a = MakePipe(/*nonblocking_read=*/true);
  ASSERT_TRUE(a.ok());
  OutputPump pump;
  pump.Add(0, std::move(a->read_end), "[0] ", dest.get(), std::move(copy));
  ASSERT_EQ(::write(a->write_end.get(), "one\ntw", 6), 6);
  a->write_end.Reset();
  pump.DrainNow(0);
  EXPECT_EQ(ReadAll(dest.get()), "[0] one\n[0] tw\n");
  EXPECT_EQ(ReadAll(reader.get()), "one\ntw");
  EXPECT_FALSE(pump.AnyRankStreamOpen());
}

}  // namespace
}  // namespace kolo::kolorun
