#include "daemon/observe/flight_recorder.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

CollectiveRecord Named(const std::string& name) {
  CollectiveRecord r;
  r.name = name;
  r.sequence = 999;  // overwritten by Record
  return r;
}

TEST(FlightRecorderTest, RecordAssignsIncreasingSequenceNumbersFromOne) {
  FlightRecorder recorder(8, 8);
  recorder.Record(Named("a"));
  recorder.Record(Named("b"));
  recorder.Record(Named("c"));
  ASSERT_EQ(recorder.records().size(), 3u);
  EXPECT_EQ(recorder.records()[0].sequence, 1u);
  EXPECT_EQ(recorder.records()[1].sequence, 2u);
  EXPECT_EQ(recorder.records()[2].sequence, 3u);
  EXPECT_EQ(recorder.records()[2].name, "c");
}

TEST(FlightRecorderTest, RecordsAreBoundedDroppingTheOldestAndKeepingSequence) {
  FlightRecorder recorder(3, 8);
  for (int i = 0; i < 10; ++i) recorder.Record(Named(absl::StrCat("t", i)));
  ASSERT_EQ(recorder.records().size(), 3u);
  // The last three survive, still numbered by their place in the whole run.
  EXPECT_EQ(recorder.records()[0].name, "t7");
  EXPECT_EQ(recorder.records()[0].sequence, 8u);
  EXPECT_EQ(recorder.records()[1].name, "t8");
  EXPECT_EQ(recorder.records()[2].name, "t9");
  EXPECT_EQ(recorder.records()[2].sequence, 10u);
}

TEST(FlightRecorderTest, ErrorsAreBoundedDroppingTheOldest) {
  FlightRecorder recorder(8, 2);
  recorder.Error("first");
  recorder.Error("second");
  recorder.Error("third");
  ASSERT_EQ(recorder.errors().size(), 2u);
  EXPECT_EQ(recorder.errors()[0], "second");
  EXPECT_EQ(recorder.errors()[1], "third");
  EXPECT_TRUE(recorder.records().empty());
}

TEST(FlightRecorderTest, RecordsAndErrorsAreBoundedIndependently) {
  FlightRecorder recorder(1, 4);
  recorder.Record(Named("a"));
  recorder.Record(Named("b"));
  recorder.Error("e1");
  recorder.Error("e2");
  EXPECT_EQ(recorder.records().size(), 1u);
  EXPECT_EQ(recorder.records().front().name, "b");
  EXPECT_EQ(recorder.errors().size(), 2u);
}

}  // namespace
}  // namespace kolo::daemon
