// The private kolod's socket: the same for every rank of a job, another for
// another job, in a directory only the user may enter.
#include "client/private_kolod.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace kolo {
namespace {

TEST(PrivateKolodTest, OneSocketPerJob) {
  EXPECT_EQ(PrivateKolodSocket("/d", "torch-a.0"), PrivateKolodSocket("/d", "torch-a.0"));
  EXPECT_NE(PrivateKolodSocket("/d", "torch-a.0"), PrivateKolodSocket("/d", "torch-a.1"));
  EXPECT_EQ(PrivateKolodSocket("/d", "x").size(), std::string("/d/").size() + 16 + 5);
}

TEST(PrivateKolodTest, RefusesADirectoryOthersMayEnter) {
  // Under /tmp: the test's own directory may be too deep for a socket path.
  char tmpl[] = "/tmp/private_kolod_test.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string runtime = tmpl;
  const std::string dir = runtime + "/kolo";
  ::mkdir(dir.c_str(), 0755);
  ::chmod(dir.c_str(), 0755);
  setenv("XDG_RUNTIME_DIR", runtime.c_str(), 1);
  auto socket = UsePrivateKolod({.job_id = "j", .local_rank = 1});
  EXPECT_EQ(socket.status().code(), absl::StatusCode::kPermissionDenied) << socket.status();
  ::chmod(dir.c_str(), 0700);
  // A rank other than local rank 0 only waits for the socket.
  socket =
      UsePrivateKolod({.job_id = "j", .local_rank = 1, .start_timeout = absl::Milliseconds(50)});
  EXPECT_EQ(socket.status().code(), absl::StatusCode::kDeadlineExceeded) << socket.status();
  EXPECT_NE(socket.status().message().find("local rank 0 starts it"), absl::string_view::npos);
  unsetenv("XDG_RUNTIME_DIR");
  ::rmdir(dir.c_str());
  ::rmdir(runtime.c_str());
}

}  // namespace
}  // namespace kolo
