#include "client/kolorun/line_prefixer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::kolorun {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Records each sink call separately, so tests can check batching as well as
// content.
class Recorder {
 public:
  LinePrefixer::Sink sink() {
    return [this](std::string_view lines) { calls_.emplace_back(lines); };
  }
  const std::vector<std::string>& calls() const { return calls_; }
  std::string joined() const {
    std::string all;
    for (const std::string& c : calls_) all += c;
    return all;
  }

 private:
  std::vector<std::string> calls_;
};

TEST(LinePrefixerTest, PrefixesOneCompleteLine) {
  Recorder rec;
  LinePrefixer p("[0] ", rec.sink());
  p.Append("hello\n");
  EXPECT_THAT(rec.calls(), ElementsAre("[0] hello\n"));
  EXPECT_FALSE(p.has_partial_line());
}

TEST(LinePrefixerTest, HoldsPartialLineUntilNewline) {
  Recorder rec;
  LinePrefixer p("[1] ", rec.sink());
  p.Append("hel");
  EXPECT_THAT(rec.calls(), IsEmpty());
  EXPECT_TRUE(p.has_partial_line());
  p.Append("lo wo");
  EXPECT_THAT(rec.calls(), IsEmpty());
  p.Append("rld\nnext");
  EXPECT_THAT(rec.calls(), ElementsAre("[1] hello world\n"));
  p.Append("\n");
  EXPECT_EQ(rec.joined(), "[1] hello world\n[1] next\n");
}

TEST(LinePrefixerTest, ManyLinesInOneChunkAreOneSinkCall) {
  Recorder rec;
  LinePrefixer p("[2] ", rec.sink());
  p.Append("a\nbb\n\nccc\n");
  EXPECT_THAT(rec.calls(), ElementsAre("[2] a\n[2] bb\n[2] \n[2] ccc\n"));
}

TEST(LinePrefixerTest, FlushEmitsLastLineWithoutNewline) {
  Recorder rec;
  LinePrefixer p("[0] ", rec.sink());
  p.Append("one\ntwo");
  p.Flush();
  EXPECT_EQ(rec.joined(), "[0] one\n[0] two\n");
  p.Flush();  // Nothing pending: no further output.
  EXPECT_EQ(rec.calls().size(), 2u);
}

TEST(LinePrefixerTest, FlushWithNothingPendingIsSilent) {
  Recorder rec;
  LinePrefixer p("[0] ", rec.sink());
  p.Flush();
  p.Append("done\n");
  p.Flush();
  EXPECT_THAT(rec.calls(), ElementsAre("[0] done\n"));
}

TEST(LinePrefixerTest, ByteAtATimeGivesSameResult) {
  Recorder rec;
  LinePrefixer p("[kolod] ", rec.sink());
  const std::string input = "x=1\ny=22\nz";
  for (char c : input) p.Append(std::string_view(&c, 1));
  p.Flush();
  EXPECT_EQ(rec.joined(), "[kolod] x=1\n[kolod] y=22\n[kolod] z\n");
}

TEST(LinePrefixerTest, OverlongLineIsCutIntoPieces) {
  Recorder rec;
  LinePrefixer p("> ", rec.sink(), /*max_line_bytes=*/4);
  p.Append("abcdefghij");
  EXPECT_EQ(rec.joined(), "> abcd\n> efgh\n");
  p.Append("\n");
  EXPECT_EQ(rec.joined(), "> abcd\n> efgh\n> ij\n");
}

TEST(LinePrefixerTest, KeepsBinaryBytesAndCarriageReturns) {
  Recorder rec;
  LinePrefixer p("[0] ", rec.sink());
  p.Append(std::string("a\0b\r\n", 5));
  EXPECT_EQ(rec.joined(), std::string("[0] a\0b\r\n", 9));
}

}  // namespace
}  // namespace kolo::kolorun
