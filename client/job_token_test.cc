#include "client/job_token.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kolo {
namespace {

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(dir ? dir : "/tmp") + "/tokXXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

TEST(JobTokenTest, CreatedOnceWithMode0600AndThenRead) {
  const std::string path = TempDir() + "/sub/job_token";
  auto first = LoadOrCreateJobToken(path);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->size(), 32u);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto again = LoadOrCreateJobToken(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
}

TEST(JobTokenTest, RanksStartingTogetherAgree) {
  const std::string dir = TempDir();
  const std::string path = dir + "/job_token";
  const int kRanks = 8;
  std::vector<pid_t> pids;
  for (int i = 0; i < kRanks; ++i) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto token = LoadOrCreateJobToken(path);
      if (!token.ok()) _exit(2);
      std::ofstream(dir + "/seen" + std::to_string(i)) << *token;
      _exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::string first;
  for (int i = 0; i < kRanks; ++i) {
    std::string seen;
    std::ifstream(dir + "/seen" + std::to_string(i)) >> seen;
    if (i == 0) first = seen;
    EXPECT_EQ(seen, first);
  }
  EXPECT_EQ(first.size(), 32u);
}

TEST(JobTokenTest, ReadableByOthersOrShortIsRefused) {
  const std::string dir = TempDir();
  const std::string open_path = dir + "/open";
  std::ofstream(open_path) << std::string(40, 'a') << "\n";
  chmod(open_path.c_str(), 0644);
  EXPECT_EQ(LoadOrCreateJobToken(open_path).status().code(), absl::StatusCode::kPermissionDenied);
  const std::string short_path = dir + "/short";
  std::ofstream(short_path) << "abc\n";
  chmod(short_path.c_str(), 0600);
  EXPECT_EQ(LoadOrCreateJobToken(short_path).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kolo
