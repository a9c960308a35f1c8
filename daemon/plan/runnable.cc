#include "daemon/plan/runnable.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/process_set_rule.h"
#include "common/rank_ranges.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon::plan {

absl::Status CheckRunsWithJoined(CollectiveKind kind, absl::string_view name,
                                 const JoinedRanks& joined) {
  if (joined.count == 0 || Traits(kind).runs_with_joined) return absl::OkStatus();
  std::string who;
  if (joined.ranks.size() == 1) {
    who = absl::StrCat("rank ", joined.ranks[0], " has");
  } else if (!joined.ranks.empty()) {
    who = absl::StrCat("ranks ", FormatRankRanges(joined.ranks), " have");
  } else {
    who = absl::StrCat(joined.count, joined.count == 1 ? " rank has" : " ranks have");
  }
  const char* kind_name = CollectiveKindName(kind);
  return absl::FailedPreconditionError(
      absl::StrCat(kind_name, " \"", name, "\": cannot run while ", who, " joined (", kind_name,
                   " does not run with joined ranks; only ",
                   KindsWith(&CollectiveTraits::runs_with_joined), " do)"));
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

absl::Status CheckAlltoallSplits(absl::string_view name, int rank, int64_t rows,
                                 const std::vector<int64_t>& splits, int64_t ranks) {
  auto refuse = [&](auto&&... why) {
    return absl::FailedPreconditionError(absl::StrCat("alltoall \"", name, "\": rank ", rank, why...));
  };
  if (splits.empty()) {
    if (ranks > 0 && rows % ranks == 0) return absl::OkStatus();
    return refuse("'s first dimension ", rows, " does not divide evenly among ", ranks,
                  " ranks; pass splits");
  }
  if (static_cast<int64_t>(splits.size()) != ranks) {
    return refuse(" sent ", splits.size(), " splits for ", ranks, " ranks");
  }
  int64_t sum = 0;
  for (int64_t v : splits) {
    if (v < 0) return refuse(" sent split ", v);
    sum += v;
    if (sum > rows) {
      return refuse("'s splits sum to ", sum, " or more, its first dimension is ", rows);
    }
  }
  if (sum != rows) return refuse("'s splits sum to ", sum, ", its first dimension is ", rows);
  return absl::OkStatus();
}

int RemovedSetId(const std::vector<int64_t>& aux) {
  const int64_t id = aux.size() == 1 ? aux[0] : 0;
  return id > 0 && id <= INT32_MAX ? static_cast<int>(id) : 0;
}

absl::Status SetChangeError(CollectiveKind kind, absl::string_view name, const absl::Status& why) {
  if (why.ok()) return why;
  return absl::Status(why.code(),
                      absl::StrCat(CollectiveKindName(kind), " \"", name, "\": ", why.message()));
}

absl::Status CheckSetChange(CollectiveKind kind, absl::string_view name,
                            const std::vector<int64_t>& aux, const ProcessSetRegistry& sets) {
  const absl::Status why =
      kind == CollectiveKind::kAddProcessSet
          ? CheckProcessSetRanks(aux, static_cast<int64_t>(sets.MembersOrAll(0).size()))
          : sets.CheckRemovable(RemovedSetId(aux));
  return SetChangeError(kind, name, why);
}

}  // namespace kolo::daemon::plan
