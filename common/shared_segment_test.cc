#include "common/shared_segment.h"

#include <fcntl.h>
#include <pty.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"

namespace kolo {
namespace {

TEST(SharedSegmentTest, AdoptSeesTheSameBytes) {
  auto created = SharedSegment::Create(1 << 20);
  ASSERT_TRUE(created.ok()) << created.status();
  std::memcpy(created->data() + 4096, "kolo", 4);
  auto facts = SharedSegment::Inspect(created->fd());
  ASSERT_TRUE(facts.ok()) << facts.status();
  EXPECT_EQ(facts->owner, getuid());
  EXPECT_EQ(facts->bytes, uint64_t{1} << 20);
  auto opened = SharedSegment::Adopt(UniqueFd(dup(created->fd())), 1 << 20);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(std::memcmp(opened->data() + 4096, "kolo", 4), 0);
  opened->data()[0] = 7;
  EXPECT_EQ(created->data()[0], 7);
}

TEST(SharedSegmentTest, SealedSegmentCannotShrink) {
  auto created = SharedSegment::Create(1 << 16);
  ASSERT_TRUE(created.ok());
  EXPECT_NE(ftruncate(created->fd(), 4096), 0);
}

TEST(SharedSegmentTest, RejectsWrongSizeAndWhatIsNotASealedMemfd) {
  auto created = SharedSegment::Create(1 << 16);
  ASSERT_TRUE(created.ok());
  EXPECT_EQ(SharedSegment::Adopt(UniqueFd(dup(created->fd())), 1 << 17).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A plain file, an unsealed memfd, a read-only one, a pipe, a terminal and
  // a closed descriptor are all refused without blocking.
  UniqueFd plain(open("/proc/self/exe", O_RDONLY));
  ASSERT_TRUE(plain.valid());
  EXPECT_EQ(SharedSegment::Inspect(plain.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  UniqueFd unsealed(memfd_create("x", MFD_ALLOW_SEALING));
  ASSERT_EQ(ftruncate(unsealed.get(), 4096), 0);
  EXPECT_EQ(SharedSegment::Inspect(unsealed.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  UniqueFd read_only(open(("/proc/self/fd/" + std::to_string(created->fd())).c_str(), O_RDONLY));
  ASSERT_TRUE(read_only.valid());
  EXPECT_EQ(SharedSegment::Inspect(read_only.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  EXPECT_EQ(SharedSegment::Inspect(pipe_fds[0]).status().code(),
            absl::StatusCode::kInvalidArgument);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  int master = -1, slave = -1;
  if (openpty(&master, &slave, nullptr, nullptr, nullptr) == 0) {
    EXPECT_EQ(SharedSegment::Inspect(slave).status().code(), absl::StatusCode::kInvalidArgument);
    close(master);
    close(slave);
  }
  EXPECT_EQ(SharedSegment::Inspect(987654).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kolo
