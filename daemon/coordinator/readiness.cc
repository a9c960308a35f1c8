#include "daemon/coordinator/readiness.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/coordinator/coordinator_options.h"
#include "daemon/plan/agreement.h"
#include "daemon/plan/runnable.h"
#include "proto/kolo/abi/collective_traits.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {
namespace {

CollectiveKind KindOf(const kolo::v1::TensorMeta& m) { return static_cast<CollectiveKind>(m.kind()); }

bool IsJoin(const kolo::v1::TensorMeta& m) { return KindOf(m) == CollectiveKind::kJoin; }

}  // namespace

void Readiness::AddReport(int node, const kolo::v1::Ready& ready) {
  for (const auto& meta : ready.tensors()) {
    if (!IsJoin(meta)) Add(node, meta);
  }
  const std::string& bits = ready.cached_bits();
  const bool anyone = joins_.any();
  for (size_t byte = 0; byte < bits.size(); ++byte) {
    for (unsigned b = static_cast<unsigned char>(bits[byte]); b != 0; b &= b - 1) {
      const size_t id = byte * 8 + static_cast<size_t>(__builtin_ctz(b));
      if (id < cache_.size()) AddCached(node, static_cast<uint32_t>(id), anyone);
    }
  }
  for (const auto& meta : ready.tensors()) {
    if (IsJoin(meta)) Add(node, meta);
  }
}

std::vector<ReadyName> Readiness::TakeReady() {
  std::vector<ReadyName> out;
  out.swap(ready_);
  return out;
}

std::vector<kolo::v1::TensorMeta> Readiness::TakeWaitingOfSet(int id) {
  std::vector<kolo::v1::TensorMeta> out;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.meta.process_set() != id) {
      ++it;
      continue;
    }
    out.push_back(std::move(it->second.meta));
    pending_.erase(it++);
  }
  return out;
}

void Readiness::AddJoin(int node, const kolo::v1::TensorMeta& meta) {
  const int nodes = members_.nodes();
  if (joins_.size() != nodes) joins_.Reset(nodes);
  if (joins_.joined(node)) return;
  SpillRounds();
  joins_.Join(node, meta.aux_size() > 0 ? static_cast<int>(meta.aux(0)) : joins_.last_rank());
  std::vector<std::string> keys;
  for (const auto& [key, pending] : pending_) keys.push_back(key);
  std::sort(keys.begin(), keys.end());  // the same order on every run
  for (const std::string& key : keys) MaybeComplete(key);
  if (joins_.all()) {
    kolo::v1::TensorMeta done = meta;
    done.clear_aux();
    done.add_aux(joins_.last_rank());
    ready_.push_back(ReadyName{done, absl::OkStatus(), {}});
    joins_.Reset();
  }
}

void Readiness::Add(int node, const kolo::v1::TensorMeta& meta) {
  if (IsJoin(meta)) return AddJoin(node, meta);
  if (meta.process_set() != 0 && !IsSetChange(KindOf(meta)) &&
      !sets_.Contains(meta.process_set())) {
    // Removed (or never made): nobody else will report it.
    ready_.push_back(
        ReadyName{meta,
                  absl::FailedPreconditionError(absl::StrCat("process set ", meta.process_set(),
                                                             " does not exist (it was removed)")),
                  {}});
    return;
  }
  std::string key = PeerKey(meta.process_set(), meta.name());
  if (cache_.any_counted()) {
    // A full report of a name other nodes reported by bit.
    if (std::optional<uint32_t> id = cache_.Find(key)) SpillRound(*id);
  }
  auto [it, inserted] = pending_.try_emplace(std::move(key));
  Pending& p = it->second;
  if (inserted) {
    p.meta = meta;
    p.desc = plan::DescOf(meta);
    p.first_node = node;
    p.reported.assign(members_.nodes(), false);
  }
  if (p.reported[node]) return;
  p.reported[node] = true;
  ++p.count;
  Tally(node, meta, p);
  MaybeComplete(it->first);
}

void Readiness::Tally(int node, const kolo::v1::TensorMeta& meta, Pending& p) const {
  const int nodes = members_.nodes();
  // A count of this node's ranks that had joined; anything else (a broken
  // or hostile member) fails the name, and the sum stays within the job.
  const int node_ranks = static_cast<int>(members_.OfNode(node).ranks.size());
  if (meta.joined() >= 0 && meta.joined() <= node_ranks) {
    p.joined += meta.joined();
  } else if (p.error.ok()) {
    p.error = absl::InvalidArgumentError(
        absl::StrCat(members_.DescribeNode(node), " reported ", meta.joined(), " of its ",
                     node_ranks, " ranks as joined for \"", meta.name(), "\""));
  }
  if (ReportsRows(KindOf(meta))) {
    if (p.rows.empty()) p.rows.resize(nodes);
    p.rows[node].assign(meta.rows().begin(), meta.rows().end());
  }
  if (Traits(KindOf(meta)).splits) {
    if (p.splits.empty()) p.splits.resize(nodes);
    p.splits[node].assign(meta.splits().begin(), meta.splits().end());
  }
  if (p.error.ok() && !meta.local_error().empty()) {
    p.error = absl::FailedPreconditionError(meta.local_error());
  }
  if (p.error.ok()) {
    if (std::optional<plan::FieldDifference> d = plan::Difference(p.desc, plan::DescOf(meta))) {
      p.error = plan::Disagreement(p.desc.kind, meta.name(), members_.DescribeNode(p.first_node),
                                   members_.DescribeNode(node), *d);
    }
  }
}

void Readiness::AddCached(int node, uint32_t id, bool anyone_joined) {
  const int set = cache_.process_set(id);
  if (anyone_joined || (set != 0 && !sets_.Contains(set)) ||
      (!pending_.empty() && pending_.contains(cache_.key(id)))) {
    Add(node, cache_.meta(id));
    return;
  }
  if (cache_.Count(id, node)) ready_.push_back(ReadyName{cache_.meta(id), absl::OkStatus(), {}});
}

void Readiness::SpillRound(uint32_t id) {
  for (int n : cache_.Spill(id)) Add(n, cache_.meta(id));
}

void Readiness::SpillRounds() {
  for (uint32_t id = 0; id < cache_.size() && cache_.any_counted(); ++id) SpillRound(id);
}

void Readiness::MaybeComplete(const std::string& key) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  const int process_set = p.meta.process_set();
  // Nodes fully joined that did not report it take part with zeros.
  std::vector<int> joined;
  for (int n : JoinedNodesOfSet(process_set)) {
    if (!p.reported[n]) joined.push_back(n);
  }
  if (p.count + static_cast<int>(joined.size()) < members_.NodesOfSet(sets_, process_set)) {
    return;
  }
  if (!p.rows.empty() || !p.splits.empty()) LayOutRows(p);
  if (p.error.ok() && (p.joined > 0 || !joined.empty())) p.error = JoinedError(p, joined);
  ready_.push_back(ReadyName{p.meta, p.error, joined});
  pending_.erase(it);
}

void Readiness::LayOutRows(Pending& p) const {
  // Allgather and alltoall only: the ranks of the set (every rank for set
  // 0), ascending; each node reported rows or splits for its ranks among
  // them, ascending.
  const std::string name = p.meta.name();
  const int nodes = members_.nodes();
  const std::vector<int>& members = sets_.MembersOrAll(p.meta.process_set());
  std::vector<int> position(size_, -1);
  for (size_t m = 0; m < members.size(); ++m) position[members[m]] = static_cast<int>(m);
  auto node_ranks = [&](int n) {
    std::vector<int> out;
    for (int r : members_.OfNode(n).ranks) {
      if (position[r] >= 0) out.push_back(r);
    }
    return out;
  };
  if (!p.rows.empty() && p.error.ok()) {
    // Every rank's rows, by global rank (0 outside the set).
    p.meta.clear_rows();
    std::vector<int64_t> rows(size_, 0);
    for (int n = 0; n < nodes && p.error.ok(); ++n) {
      if (!p.reported[n]) continue;
      const std::vector<int> ranks = node_ranks(n);
      if (p.rows[n].size() != ranks.size()) {
        p.error = absl::FailedPreconditionError(
            absl::StrCat("allgather \"", name, "\": ", members_.DescribeNode(n), " sent ",
                         p.rows[n].size(), " row counts for ", ranks.size(), " ranks"));
        break;
      }
      for (size_t i = 0; i < ranks.size(); ++i) rows[ranks[i]] = p.rows[n][i];
    }
    for (int64_t r : rows) p.meta.add_rows(r);
  }
  if (!p.splits.empty() && p.error.ok()) {
    // The set's split matrix: row m is what its m-th rank sends to each.
    p.meta.clear_splits();
    const size_t k = members.size();
    std::vector<int64_t> matrix(k * k, 0);
    for (int n = 0; n < nodes && p.error.ok(); ++n) {
      if (!p.reported[n]) continue;
      const std::vector<int> ranks = node_ranks(n);
      if (p.splits[n].size() != ranks.size() * k) {
        p.error = absl::FailedPreconditionError(
            absl::StrCat("alltoall \"", name, "\": ", members_.DescribeNode(n), " sent ",
                         p.splits[n].size(), " splits for ", ranks.size(), " ranks of a set of ", k));
        break;
      }
      for (size_t i = 0; i < ranks.size(); ++i) {
        std::copy(p.splits[n].begin() + i * k, p.splits[n].begin() + (i + 1) * k,
                  matrix.begin() + static_cast<size_t>(position[ranks[i]]) * k);
      }
    }
    for (int64_t v : matrix) p.meta.add_splits(v);
  }
}

std::vector<int> Readiness::JoinedNodesOfSet(int process_set) const {
  std::vector<int> out;
  if (!joins_.any()) return out;  // the usual case: nobody has joined
  const std::vector<int>& members = sets_.MembersOrAll(process_set);
  for (int n = 0; n < joins_.size(); ++n) {
    if (!joins_.joined(n)) continue;
    for (int r : members_.OfNode(n).ranks) {
      if (std::binary_search(members.begin(), members.end(), r)) {
        out.push_back(n);
        break;
      }
    }
  }
  return out;
}

absl::Status Readiness::JoinedError(const Pending& p, const std::vector<int>& joined_nodes) const {
  const kolo::v1::TensorMeta& m = p.meta;
  const auto kind = static_cast<CollectiveKind>(m.kind());
  auto refuse = [&](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat(CollectiveKindName(kind), " \"", m.name(), "\": ", why));
  };
  const std::vector<int>& members = sets_.MembersOrAll(m.process_set());
  plan::JoinedRanks joined{p.joined, {}};
  for (int n : joined_nodes) {
    for (int r : members_.OfNode(n).ranks) {
      joined.count += std::binary_search(members.begin(), members.end(), r) ? 1 : 0;
    }
  }
  KOLO_RETURN_IF_ERROR(plan::CheckRunsWithJoined(kind, m.name(), joined));
  if (m.device() && p.joined > 0 && static_cast<ReduceOp>(m.op()) != ReduceOp::kSum &&
      static_cast<ReduceOp>(m.op()) != ReduceOp::kAverage) {
    return refuse("device tensors reduce joined ranks' zeros with sum or average only");
  }
  if (joined_nodes.empty()) return absl::OkStatus();
  if (m.process_set() != 0) {
    return refuse(
        "a process set's collectives cannot run while every rank of one of its nodes "
        "has joined");
  }
  if (m.device()) return refuse("device tensors cannot run while every rank of a node has joined");
  return absl::OkStatus();
}

}  // namespace kolo::daemon
