#include "common/process_set_rule.h"

#include "absl/strings/str_cat.h"

namespace kolo {

absl::Status CheckProcessSetRanks(absl::Span<const int64_t> ranks, int64_t job_size) {
  if (ranks.empty()) return absl::InvalidArgumentError("add_process_set: no ranks given");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= job_size || (i > 0 && ranks[i] <= ranks[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("add_process_set: ranks must be distinct, ascending and in [0, ", job_size,
                       "); got ", ranks[i], " at position ", i));
    }
  }
  return absl::OkStatus();
}

}  // namespace kolo
