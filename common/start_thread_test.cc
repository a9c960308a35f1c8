// StartThread names its thread (what `top -H` and a debugger show), cut to
// the length the system keeps.
#include "common/start_thread.h"

#include <pthread.h>

#include <string>

#include "gtest/gtest.h"

namespace kolo {
namespace {

std::string NameOnNewThread(const std::string& name) {
  std::string seen;
  auto t = StartThread("a test thread", name, [&seen] {
    char buf[32] = {};
    pthread_getname_np(pthread_self(), buf, sizeof(buf));
    seen = buf;
  });
  EXPECT_TRUE(t.ok()) << t.status();
  if (t.ok()) t->join();
  return seen;
}

TEST(StartThreadTest, TheThreadCarriesItsName) {
  EXPECT_EQ(NameOnNewThread("kolo-plan"), "kolo-plan");
}

TEST(StartThreadTest, ALongNameIsCutToWhatTheSystemKeeps) {
  EXPECT_EQ(NameOnNewThread("kolo-a-very-long-thread-name"),
            std::string("kolo-a-very-long-thread-name").substr(0, kMaxThreadName));
}

}  // namespace
}  // namespace kolo
