#include "common/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace kolo {
namespace {

TEST(Utf8Test, AcceptsWellFormedText) {
  for (const char* s : {"", "grad/w1", "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                        "\xed\x9f\xbf", "\xf4\x8f\xbf\xbf", "\xef\xbf\xbf"}) {
    EXPECT_TRUE(IsValidUtf8(s)) << s;
  }
}

TEST(Utf8Test, RefusesMalformedText) {
  for (const std::string& s : std::initializer_list<std::string>{
           "\xff", "\x80", "ab\xbf", "\xc3", "\xc3(", "\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf",
           "\xed\xa0\x80", "\xf0\x80\x80\xaf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xe2\x82",
           "\xf0\x9f\x98", "x\xe2\x28\xa1"}) {
    EXPECT_FALSE(IsValidUtf8(s)) << testing::PrintToString(s);
  }
}

}  // namespace
}  // namespace kolo
