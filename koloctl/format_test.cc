#include "koloctl/format.h"

#include <gtest/gtest.h>

#include "proto/kolo/v1/status.pb.h"

namespace kolo::koloctl {
namespace {

TEST(CompressRanksTest, Runs) {
  EXPECT_EQ(CompressRanks({0, 1, 2, 4, 5, 6}), "0-2,4-6");
  EXPECT_EQ(CompressRanks({3, 7}), "3,7");
  EXPECT_EQ(CompressRanks({4, 5}), "4,5");
  EXPECT_EQ(CompressRanks({9}), "9");
  EXPECT_EQ(CompressRanks({}), "-");
}

TEST(CompressRanksTest, SortsAndDeduplicates) {
  EXPECT_EQ(CompressRanks({6, 0, 2, 1, 1, 5, 4}), "0-2,4-6");
  EXPECT_EQ(CompressRanks({0, 1, 2, 3, 8, 10, 11, 12, 13}), "0-3,8,10-13");
}

TEST(FormatDurationTest, Scales) {
  EXPECT_EQ(FormatDuration(-1), "never");
  EXPECT_EQ(FormatDuration(0), "0ms");
  EXPECT_EQ(FormatDuration(0.25), "250ms");
  EXPECT_EQ(FormatDuration(1.5), "1.5s");
  EXPECT_EQ(FormatDuration(42.9), "42s");
  EXPECT_EQ(FormatDuration(61), "1m01s");
  EXPECT_EQ(FormatDuration(2 * 3600 + 3 * 60 + 5), "2h03m");
  EXPECT_EQ(FormatDuration(3 * 86400 + 4 * 3600 + 1), "3d04h");
}

TEST(FormatBytesTest, IecUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(64ull << 20), "64 MiB");
  EXPECT_EQ(FormatBytes((12ull << 30) / 10), "1.2 GiB");
  EXPECT_EQ(FormatRate(0), "-");
  EXPECT_EQ(FormatRate(2.5 * (1 << 20)), "2.5 MiB/s");
}

TEST(TableTest, AlignsColumnsWithoutTrailingBlanks) {
  Table table({{"JOB", Table::Align::kLeft},
               {"SIZE", Table::Align::kRight},
               {"STATE", Table::Align::kLeft}});
  table.AddRow({"train-a", "4", "running"});
  table.AddRow({"b", "128", "aborted"});
  EXPECT_EQ(table.Render(),
            "JOB      SIZE  STATE\n"
            "train-a     4  running\n"
            "b         128  aborted\n");
}

TEST(TableTest, IndentShortRowsAndNoHeader) {
  Table table({{"A", Table::Align::kLeft}, {"B", Table::Align::kLeft}});
  table.AddRow({"x"});
  table.AddRow({"long", "y"});
  EXPECT_EQ(table.Render(2),
            "  A     B\n"
            "  x\n"
            "  long  y\n");
  EXPECT_EQ(table.Render(0, /*header=*/false),
            "x\n"
            "long  y\n");
}

TEST(ToJsonTest, KeepsProtoFieldNamesAndDefaults) {
  kolo::v1::StopTimelineResponse response;
  response.set_events(3);
  absl::StatusOr<std::string> json = ToJson(response);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*json,
            "{\n"
            " \"trace_json\": \"\",\n"
            " \"events\": \"3\",\n"
            " \"dropped\": \"0\"\n"
            "}\n");

  kolo::v1::PendingTensor pending;
  pending.set_name("grad/w1");
  pending.add_missing_ranks(3);
  json = ToJson(pending);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_NE(json->find("\"missing_ranks\": [\n  3\n ]"), std::string::npos) << *json;
  EXPECT_NE(json->find("\"submitted_ranks\": []"), std::string::npos) << *json;
  EXPECT_EQ(json->find("missingRanks"), std::string::npos) << *json;
}

}  // namespace
}  // namespace kolo::koloctl
