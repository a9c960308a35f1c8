#include "common/shared_segment.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"

namespace kolo {
namespace {

TEST(SharedSegmentTest, OpenFromProcessSeesTheSameBytes) {
  auto created = SharedSegment::Create(1 << 20);
  ASSERT_TRUE(created.ok()) << created.status();
  std::memcpy(created->data() + 4096, "kolo", 4);
  uid_t owner = 12345;
  auto opened = SharedSegment::OpenFromProcess(getpid(), created->fd(), 1 << 20, &owner);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(owner, getuid());
  EXPECT_EQ(std::memcmp(opened->data() + 4096, "kolo", 4), 0);
  opened->data()[0] = 7;
  EXPECT_EQ(created->data()[0], 7);
}

TEST(SharedSegmentTest, SealedSegmentCannotShrink) {
  auto created = SharedSegment::Create(1 << 16);
  ASSERT_TRUE(created.ok());
  EXPECT_NE(ftruncate(created->fd(), 4096), 0);
}

TEST(SharedSegmentTest, RejectsWrongSizeUnsealedAndMissing) {
  auto created = SharedSegment::Create(1 << 16);
  ASSERT_TRUE(created.ok());
  EXPECT_EQ(
      SharedSegment::OpenFromProcess(getpid(), created->fd(), 1 << 17, nullptr).status().code(),
      absl::StatusCode::kInvalidArgument);
  int plain = open("/proc/self/exe", O_RDONLY);
  ASSERT_GE(plain, 0);
  EXPECT_FALSE(SharedSegment::OpenFromProcess(getpid(), plain, 0, nullptr).ok());
  close(plain);
  EXPECT_EQ(SharedSegment::OpenFromProcess(getpid(), 987654, 4096, nullptr).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(SharedSegment::OpenFromProcess(-1, 3, 4096, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kolo
