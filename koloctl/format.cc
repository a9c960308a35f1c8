#include "koloctl/format.h"

#include <google/protobuf/message.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kolo::koloctl {

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render(int indent, bool header) const {
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    widths[c] = columns_[c].title.size();
    for (const auto& row : rows_) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line(indent, ' ');
    for (size_t c = 0; c < cells.size(); ++c) {
      const bool last = c + 1 == cells.size();
      const size_t pad = widths[c] - cells[c].size();
      if (columns_[c].align == Align::kRight) {
        line.append(pad, ' ');
        line += cells[c];
      } else {
        line += cells[c];
        if (!last) line.append(pad, ' ');
      }
      if (!last) line += "  ";
    }
    // A left-aligned empty last cell would leave the separator behind.
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  if (header) {
    std::vector<std::string> titles;
    titles.reserve(columns_.size());
    for (const auto& col : columns_) titles.push_back(col.title);
    emit(titles);
  }
  for (const auto& row : rows_) emit(row);
  return out;
}

std::string CompressRanks(absl::Span<const int32_t> ranks) {
  if (ranks.empty()) return "-";
  std::vector<int32_t> sorted(ranks.begin(), ranks.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  size_t i = 0;
  while (i < sorted.size()) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ',';
    if (j == i) {
      absl::StrAppend(&out, sorted[i]);
    } else if (j == i + 1) {
      absl::StrAppend(&out, sorted[i], ",", sorted[j]);
    } else {
      absl::StrAppend(&out, sorted[i], "-", sorted[j]);
    }
    i = j + 1;
  }
  return out;
}

std::string FormatDuration(double seconds) {
  if (std::isnan(seconds) || seconds < 0) return "never";
  if (seconds < 1) {
    return absl::StrCat(static_cast<int64_t>(std::llround(seconds * 1000)), "ms");
  }
  if (seconds < 10) return absl::StrFormat("%.1fs", seconds);
  const int64_t s = static_cast<int64_t>(seconds);
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
}

namespace {

std::string FormatScaled(double value) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(static_cast<uint64_t>(value), " B");
  std::string number = absl::StrFormat("%.1f", value);
  if (absl::EndsWith(number, ".0")) number.resize(number.size() - 2);
  return absl::StrCat(number, " ", kUnits[unit]);
}

}  // namespace

std::string FormatBytes(uint64_t bytes) { return FormatScaled(static_cast<double>(bytes)); }

std::string FormatRate(double bytes_per_s) {
  if (!(bytes_per_s > 0)) return "-";
  return absl::StrCat(FormatScaled(bytes_per_s), "/s");
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("rendering ", message.GetTypeName(), " as JSON: ", status.ToString()));
  }
  if (out.empty() || out.back() != '\n') out += '\n';
  return out;
}

}  // namespace kolo::koloctl
