#include "client/kolorun/remote_shell.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::kolorun {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

TEST(ShellQuoteTest, PlainWordsStayAsTheyAre) {
  EXPECT_EQ(ShellQuote("python3"), "python3");
  EXPECT_EQ(ShellQuote("/usr/bin/train.py"), "/usr/bin/train.py");
  EXPECT_EQ(ShellQuote("--lr=0.1"), "--lr=0.1");
  EXPECT_EQ(ShellQuote("KOLO_COORDINATOR=hostA:7371"), "KOLO_COORDINATOR=hostA:7371");
}

TEST(ShellQuoteTest, SpecialWordsAreSingleQuoted) {
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("$HOME"), "'$HOME'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote("'"), "''\\'''");
  EXPECT_EQ(ShellQuote("say \"hi\""), "'say \"hi\"'");
  EXPECT_EQ(ShellQuote("a\\b"), "'a\\b'");
  EXPECT_EQ(ShellQuote("line1\nline2"), "'line1\nline2'");
  EXPECT_EQ(ShellQuote("~"), "'~'");
  EXPECT_EQ(ShellQuote("*.py"), "'*.py'");
  EXPECT_EQ(ShellQuote("a;rm -rf x"), "'a;rm -rf x'");
  EXPECT_EQ(ShellQuote("`id`"), "'`id`'");
}

// A POSIX shell reads every quoted word back byte for byte.
TEST(ShellQuoteTest, ShellReadsWordsBack) {
  const std::vector<std::string> words = {"plain",
                                          "",
                                          "two words",
                                          "  lead and trail  ",
                                          "$HOME",
                                          "${X:-y}",
                                          "$(id)",
                                          "`id`",
                                          "it's",
                                          "''",
                                          "\"double\"",
                                          "back\\slash",
                                          "\\",
                                          "new\nline",
                                          "tab\there",
                                          "glob*?[a]",
                                          "semi;colon|pipe&amp",
                                          "#hash",
                                          "~user",
                                          "!bang",
                                          "{a,b}",
                                          "a=b",
                                          "-n",
                                          "\x01\x7f\xc3\xa9"};
  char dir_template[] = "/tmp/kolorun_quote.XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string out = absl::StrCat(dir_template, "/out");
  std::vector<std::string> quoted;
  for (const std::string& w : words) quoted.push_back(ShellQuote(w));
  // system() runs its argument with /bin/sh -c, as sshd runs ssh's words.
  const std::string script =
      absl::StrCat("printf '%s\\0' ", absl::StrJoin(quoted, " "), " > ", out);
  ASSERT_EQ(std::system(script.c_str()), 0) << script;
  std::ifstream in(out, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<std::string> read_back = absl::StrSplit(ss.str(), '\0');
  ASSERT_FALSE(read_back.empty());
  EXPECT_EQ(read_back.back(), "");
  read_back.pop_back();
  EXPECT_THAT(read_back, ElementsAreArray(words));
  ::unlink(out.c_str());
  ::rmdir(dir_template);
}

TEST(SshArgvTest, OptionsHostThenExecEnvAndQuotedCommand) {
  const std::vector<std::string> argv =
      SshArgv({.ssh_program = "/usr/bin/ssh",
               .ssh_args = {"-p", "2222"},
               .host = "hostB",
               .env = {"KOLO_RANK=2", "KOLO_JOB_ID=job 1"},
               .command = {"python3", "train.py", "--name", "it's $x"}});
  EXPECT_THAT(argv, ElementsAre("/usr/bin/ssh", "-o", "BatchMode=yes", "-p", "2222", "hostB",
                                "exec", "env", "KOLO_RANK=2", "'KOLO_JOB_ID=job 1'", "python3",
                                "train.py", "--name", "'it'\\''s $x'"));
}

TEST(RemoteCommandErrorTest, CommandsEnvWouldMisread) {
  EXPECT_EQ(RemoteCommandError({"python3", "a=b", "-x"}), "");
  EXPECT_THAT(RemoteCommandError({"./a=b"}), HasSubstr("contains '='"));
  EXPECT_THAT(RemoteCommandError({"-weird"}), HasSubstr("starts with '-'"));
  EXPECT_THAT(RemoteCommandError({}), HasSubstr("no command"));
}

}  // namespace
}  // namespace kolo::kolorun
