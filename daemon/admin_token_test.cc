#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "daemon/daemon.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

// A path in the test's private temporary directory that does not exist yet.
std::string FreshPath(const std::string& name) {
  std::string path = ::testing::TempDir() + "/" + name;
  unlink(path.c_str());
  return path;
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  ASSERT_TRUE(out.good()) << path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(LoadOrCreateAdminTokenTest, CreatesAnOwnerOnlyFileWithALongTokenWhenAbsent) {
  const std::string path = FreshPath("create.token");
  auto token = LoadOrCreateAdminToken(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_GE(token->size(), 16u);
  EXPECT_EQ(token->find_first_of(" \t\r\n"), std::string::npos);

  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadFile(path), *token + "\n");
}

TEST(LoadOrCreateAdminTokenTest, ReturnsTheSameTokenWhenReadAgain) {
  const std::string path = FreshPath("reread.token");
  auto first = LoadOrCreateAdminToken(path);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = LoadOrCreateAdminToken(path);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, *first);
}

// Two kolods started together with sockets in one directory share the
// token path: every one of them must come up with the same token, none may
// see the file empty or fail because another created it first.
TEST(LoadOrCreateAdminTokenTest, DaemonsStartingTogetherAgreeOnOneToken) {
  for (int round = 0; round < 50; ++round) {
    const std::string path = FreshPath("race.token");
    constexpr int kDaemons = 4;
    std::vector<absl::StatusOr<std::string>> tokens(kDaemons, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int i = 0; i < kDaemons; ++i) {
      threads.emplace_back([&, i] { tokens[i] = LoadOrCreateAdminToken(path); });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < kDaemons; ++i) {
      ASSERT_TRUE(tokens[i].ok()) << "round " << round << " daemon " << i << ": "
                                  << tokens[i].status();
      EXPECT_EQ(*tokens[i], *tokens[0]);
    }
    EXPECT_EQ(ReadFile(path), *tokens[0] + "\n");
  }
}

TEST(LoadOrCreateAdminTokenTest, FreshFilesGetDifferentTokens) {
  auto a = LoadOrCreateAdminToken(FreshPath("a.token"));
  auto b = LoadOrCreateAdminToken(FreshPath("b.token"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
}

TEST(LoadOrCreateAdminTokenTest, TrimsSurroundingWhitespace) {
  const std::string path = FreshPath("spaced.token");
  WriteFile(path, " \t0123456789abcdef-operator \r\n\n");
  auto token = LoadOrCreateAdminToken(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "0123456789abcdef-operator");
}

TEST(LoadOrCreateAdminTokenTest, RejectsAnEmptyFile) {
  const std::string path = FreshPath("empty.token");
  WriteFile(path, "");
  auto token = LoadOrCreateAdminToken(path);
  EXPECT_EQ(token.status().code(), absl::StatusCode::kFailedPrecondition);
  // The file is left for the operator to fix, not silently replaced.
  EXPECT_EQ(ReadFile(path), "");
}

TEST(LoadOrCreateAdminTokenTest, RejectsAWhitespaceOnlyOrTooShortToken) {
  for (const std::string& contents :
       {std::string(" \n\t\n"), std::string("short\n"), std::string("0123456789abcde\n")}) {
    const std::string path = FreshPath("short.token");
    WriteFile(path, contents);
    auto token = LoadOrCreateAdminToken(path);
    EXPECT_EQ(token.status().code(), absl::StatusCode::kFailedPrecondition)
        << "contents \"" << contents << "\"";
  }
  // Exactly 16 characters is enough.
  const std::string path = FreshPath("sixteen.token");
  WriteFile(path, "0123456789abcdef\n");
  auto token = LoadOrCreateAdminToken(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "0123456789abcdef");
}

TEST(LoadOrCreateAdminTokenTest, FailsWhenTheDirectoryDoesNotExist) {
  auto token = LoadOrCreateAdminToken(::testing::TempDir() + "/no/such/dir/admin.token");
  EXPECT_FALSE(token.ok());
}

}  // namespace
}  // namespace kolo::daemon
