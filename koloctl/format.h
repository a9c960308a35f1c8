// Pure text formatting for koloctl: aligned tables, rank ranges, durations,
// byte counts and the JSON rendering of a response. Nothing here does I/O.
//
// Thread-safety: the free functions are thread-safe; a Table is not (one
// thread builds and renders it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace google::protobuf {
class Message;
}

namespace kolo::koloctl {

// A table of text cells rendered with columns padded to their widest cell,
// two spaces between columns and no trailing blanks. Rows shorter than the
// header are padded with empty cells; extra cells are an error of the
// caller and are dropped.
class Table {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string title;
    Align align = Align::kLeft;
  };

  explicit Table(std::vector<Column> columns);

  void AddRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }

  // Every line, the header first unless `header` is false, each ending in
  // '\n'; `indent` spaces precede each line.
  std::string Render(int indent = 0, bool header = true) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// Ranks as sorted, de-duplicated runs: {0,1,2,4,5,6} -> "0-2,4-6". A run of
// two prints as "4,5". An empty list prints as "-".
std::string CompressRanks(absl::Span<const int32_t> ranks);

// A duration for humans: "250ms", "1.5s", "42s", "1m01s", "2h03m", "3d04h".
// Negative values mean "never" (the Status API's -1) and print as "never".
std::string FormatDuration(double seconds);

// A byte count in IEC units: "512 B", "1.5 KiB", "64 MiB", "1.2 GiB".
std::string FormatBytes(uint64_t bytes);

// A throughput: FormatBytes of the rate followed by "/s"; "-" for zero or a
// negative rate.
std::string FormatRate(double bytes_per_s);

// `message` as JSON for scripts: proto field names as written in the
// .proto, fields at their default value included, indented, ending in '\n'.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message);

}  // namespace kolo::koloctl
