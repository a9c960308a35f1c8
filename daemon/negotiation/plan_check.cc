#include "daemon/negotiation/plan_check.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/transport/sealed_lane.h"
#include "daemon/plan/tensor_meta.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon {
namespace {

absl::Status Bad(const ReadySet& set, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat(CollectiveKindName(set.requests.front().kind), " \"", set.name, "\": ", why));
}

// Whether `rows` rows of `row_bytes` stay within one tensor's bound.
bool WithinBound(int64_t rows, uint64_t row_bytes) {
  if (rows < 0) return false;
  return row_bytes == 0 || static_cast<uint64_t>(rows) <= kMaxPlannedTensorBytes / row_bytes;
}

absl::Status CheckNodes(const std::vector<int>& nodes_of_entry, int nodes) {
  for (int n : nodes_of_entry) {
    if (n < 0 || n >= nodes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the plan names node ", n, " of a job on ", nodes, " nodes"));
    }
  }
  return absl::OkStatus();
}

// Allgather: every rank's rows in bounds; this node's ranks' as submitted.
absl::Status CheckRows(const PlannedEntry& entry, const ReadySet& set, int job_size) {
  if (static_cast<int>(entry.rows.size()) != job_size) {
    return Bad(set, absl::StrCat("the plan gives ", entry.rows.size(), " row counts for ", job_size,
                                 " ranks"));
  }
  const uint64_t row_bytes = RowBytes(set.requests.front());
  uint64_t total = 0;
  for (int r = 0; r < job_size; ++r) {
    if (!WithinBound(entry.rows[r], row_bytes)) {
      return Bad(set, absl::StrCat("the plan gives rank ", r, " ", entry.rows[r], " rows"));
    }
    total += static_cast<uint64_t>(entry.rows[r]) * row_bytes;
    if (total > kMaxPlannedTensorBytes) {
      return Bad(set,
                 absl::StrCat("the plan gathers more than ", kMaxPlannedTensorBytes, " bytes"));
    }
  }
  const kolo::v1::TensorMeta mine = plan::MetaOf(set, job_size);
  const std::vector<const Request*> by_rank = plan::ByRank(set);
  for (size_t i = 0; i < by_rank.size() && i < static_cast<size_t>(mine.rows_size()); ++i) {
    const int rank = by_rank[i]->rank;
    if (rank < 0 || rank >= job_size || entry.rows[rank] != mine.rows(static_cast<int>(i))) {
      return Bad(set, absl::StrCat("the plan gives rank ", rank, " ",
                                   rank >= 0 && rank < job_size ? entry.rows[rank] : -1,
                                   " rows, it submitted ", mine.rows(static_cast<int>(i))));
    }
  }
  return absl::OkStatus();
}

// Alltoall: a size x size matrix in bounds; this node's ranks' rows of it
// as they submitted, so what is read from each input is exactly that input.
absl::Status CheckSplits(const PlannedEntry& entry, const ReadySet& set, int job_size,
                         const std::vector<int>& members) {
  const size_t n = members.size();
  if (entry.splits.size() != n * n) {
    return Bad(set, absl::StrCat("the plan gives ", entry.splits.size(), " splits for ", n,
                                 " ranks (", n * n, " wanted)"));
  }
  const uint64_t row_bytes = RowBytes(set.requests.front());
  for (size_t i = 0; i < n; ++i) {
    uint64_t sent = 0, received = 0;
    for (size_t j = 0; j < n; ++j) {
      const int64_t out = entry.splits[i * n + j];
      const int64_t in = entry.splits[j * n + i];
      if (!WithinBound(out, row_bytes) || !WithinBound(in, row_bytes)) {
        return Bad(set, absl::StrCat("the plan has rank ", members[i], " send ",
                                     WithinBound(out, row_bytes) ? in : out, " rows"));
      }
      sent += static_cast<uint64_t>(out) * row_bytes;
      received += static_cast<uint64_t>(in) * row_bytes;
      if (sent > kMaxPlannedTensorBytes || received > kMaxPlannedTensorBytes) {
        return Bad(set, absl::StrCat("the plan moves more than ", kMaxPlannedTensorBytes,
                                     " bytes to or from rank ", members[i]));
      }
    }
  }
  const kolo::v1::TensorMeta mine = plan::MetaOf(set, job_size);
  const std::vector<const Request*> by_rank = plan::ByRank(set);
  if (static_cast<size_t>(mine.splits_size()) != by_rank.size() * n) {
    return Bad(set, absl::StrCat("this node's ranks submitted splits for ",
                                 by_rank.empty() ? 0 : mine.splits_size() / by_rank.size(),
                                 " ranks; the plan's process set has ", n));
  }
  for (size_t k = 0; k < by_rank.size(); ++k) {
    const int rank = by_rank[k]->rank;
    const auto at = std::lower_bound(members.begin(), members.end(), rank);
    if (at == members.end() || *at != rank) {
      return Bad(set, absl::StrCat("rank ", rank, " is not in the plan's process set"));
    }
    const size_t i = static_cast<size_t>(at - members.begin());
    for (size_t j = 0; j < n; ++j) {
      const int64_t planned = entry.splits[i * n + j];
      const int64_t asked = mine.splits(static_cast<int>(k * n + j));
      if (planned != asked) {
        return Bad(set, absl::StrCat("the plan has rank ", rank, " send ", planned,
                                     " rows to rank ", members[j], "; it asked to send ", asked));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPlannedEntry(const PlannedEntry& entry, const std::vector<ReadySet>& sets,
                               int job_size, const std::vector<int>* set_ranks, int nodes) {
  if (absl::Status s = CheckNodes(entry.joined_nodes, nodes); !s.ok()) return s;
  if (entry.last_joined < -1 || entry.last_joined >= job_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the plan says rank ", entry.last_joined, " joined last, of ", job_size));
  }
  if (sets.empty() || !entry.error.ok()) return absl::OkStatus();
  for (const ReadySet& set : sets) {
    if (set.requests.empty()) return absl::InternalError("a parked set without requests");
  }
  const CollectiveKind kind = sets.front().requests.front().kind;
  for (const ReadySet& set : sets) {
    if (set.requests.front().kind != kind) {
      return Bad(set, absl::StrCat("the plan fuses it with ", CollectiveKindName(kind), " \"",
                                   sets.front().name, "\""));
    }
  }
  if (HasPerRankRows(kind) && sets.size() != 1) {
    return Bad(sets.front(),
               absl::StrCat("the plan puts ", sets.size(), " tensors in one response"));
  }
  if (!ReportsRows(kind) && !entry.rows.empty()) {
    return Bad(sets.front(), "the plan gives row counts for a collective that takes none");
  }
  if (!Traits(kind).splits && !entry.splits.empty()) {
    return Bad(sets.front(), "the plan gives splits for a collective that takes none");
  }
  if (ReportsRows(kind)) return CheckRows(entry, sets.front(), job_size);
  if (Traits(kind).splits) {
    std::vector<int> members;
    if (set_ranks != nullptr) {
      members = *set_ranks;
    } else {
      for (int r = 0; r < job_size; ++r) members.push_back(r);
    }
    return CheckSplits(entry, sets.front(), job_size, members);
  }
  return absl::OkStatus();
}

absl::Status CheckWelcome(const kolo::v1::Welcome& welcome, int job_size,
                          const std::vector<int>& local_ranks, const std::string& own_address) {
  constexpr size_t kMaxWorkerAddressBytes = 64 << 10;
  const int nodes = welcome.nodes_size();
  if (nodes < 1 || nodes > job_size || welcome.node_index() < 0 || welcome.node_index() >= nodes) {
    return absl::InvalidArgumentError(absl::StrCat("a Welcome with ", nodes, " nodes, this one ",
                                                   welcome.node_index(), ", for ", job_size,
                                                   " ranks"));
  }
  if (!welcome.lane_key().empty() && welcome.lane_key().size() != kLaneKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the Welcome carries a lane key of ",
                                                   welcome.lane_key().size(), " bytes, not ",
                                                   kLaneKeyBytes));
  }
  std::vector<int> node_of(job_size, -1);
  for (int n = 0; n < nodes; ++n) {
    const kolo::v1::NodeEntry& e = welcome.nodes(n);
    if (e.ucx_address().empty() || e.ucx_address().size() > kMaxWorkerAddressBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the Welcome gives node ", n, " a worker address of ", e.ucx_address().size(), " bytes"));
    }
    for (int r : e.ranks()) {
      if (r < 0 || r >= job_size || node_of[r] != -1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the Welcome places rank ", r, " on node ", n, " (of ", job_size,
            " ranks; already on node ", r >= 0 && r < job_size ? node_of[r] : -1, ")"));
      }
      node_of[r] = n;
    }
  }
  for (int r = 0; r < job_size; ++r) {
    if (node_of[r] == -1) {
      return absl::InvalidArgumentError(absl::StrCat("the Welcome places rank ", r, " nowhere"));
    }
  }
  const kolo::v1::NodeEntry& me = welcome.nodes(welcome.node_index());
  std::vector<int> mine = local_ranks;
  std::sort(mine.begin(), mine.end());
  std::vector<int> said(me.ranks().begin(), me.ranks().end());
  std::sort(said.begin(), said.end());
  if (said != mine || me.ucx_address() != own_address) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the Welcome's node ", welcome.node_index(), " (this one) is not this node: ranks ",
        absl::StrJoin(me.ranks(), ","), " where it hosts ", absl::StrJoin(mine, ",")));
  }
  return absl::OkStatus();
}

absl::Status CheckJoinedEntry(const PlannedEntry& entry, int nodes) {
  if (absl::Status s = CheckNodes(entry.joined_nodes, nodes); !s.ok()) return s;
  if (entry.metas.empty()) {
    return absl::InvalidArgumentError("a planned response without metadata");
  }
  const uint32_t kind = entry.metas.front().kind();
  for (const kolo::v1::TensorMeta& m : entry.metas) {
    if (m.kind() != kind || m.bytes() > kMaxPlannedTensorBytes) {
      return absl::InvalidArgumentError(absl::StrCat("the plan lays out \"", m.name(), "\" as ",
                                                     m.bytes(), " bytes of kind ", m.kind(),
                                                     " beside kind ", kind));
    }
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon
