#include "common/rank_ranges.h"

#include "absl/strings/str_cat.h"

namespace kolo {

std::string FormatRankRanges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    if (j == i) {
      absl::StrAppend(&out, ranks[i]);
    } else {
      absl::StrAppend(&out, ranks[i], "-", ranks[j]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace kolo
