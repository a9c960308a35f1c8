#include "daemon/plan/runnable.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/rank_ranges.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon::plan {

absl::Status CheckRunsWithJoined(CollectiveKind kind, absl::string_view name,
                                 const JoinedRanks& joined) {
  if (joined.count == 0 || Traits(kind).runs_with_joined) return absl::OkStatus();
  std::string who;
  if (!joined.ranks.empty()) {
    who = absl::StrCat("ranks ", FormatRankRanges(joined.ranks), " have");
  } else {
    who = absl::StrCat(joined.count, joined.count == 1 ? " rank has" : " ranks have");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      CollectiveKindName(kind), " \"", name, "\": cannot run while ", who, " joined (only ",
      KindsWith(&CollectiveTraits::runs_with_joined), " can)"));
}

absl::Status CheckRootNotJoined(absl::string_view name, int root_rank, bool root_joined) {
  if (!root_joined) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("broadcast \"", name, "\": root rank ", root_rank, " has joined"));
}

absl::Status CheckRootInSet(absl::string_view name, int root_rank, int process_set,
                            const std::vector<int>& members) {
  if (std::binary_search(members.begin(), members.end(), root_rank)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "broadcast \"", name, "\": root rank ", root_rank, " is not in process set ", process_set));
}

absl::Status CheckWholeJob(CollectiveKind kind, absl::string_view name, int process_set) {
  if (!Traits(kind).control || process_set == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(kind), " \"", name,
                                                 "\": involves every rank of the job, not process "
                                                 "set ",
                                                 process_set));
}

}  // namespace kolo::daemon::plan
