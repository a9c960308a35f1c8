#include "daemon/coordinator/coordinator.h"
#include "daemon/coordinator/abort_status.h"
#include "daemon/coordinator/coordinator_lane.h"
#include "daemon/transport/sealed_lane.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/rank_ranges.h"
#include "common/secret_compare.h"
#include "common/status_macros.h"
#include "daemon/backend/device_comm_plan.h"
#include "daemon/plan/agreement.h"
#include "daemon/plan/fusion.h"
#include "daemon/plan/runnable.h"
#include "proto/kolo/abi/collective_traits.h"
#include "proto/kolo/abi/types.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

CollectiveKind KindOf(const kolo::v1::TensorMeta& m) { return static_cast<CollectiveKind>(m.kind()); }

bool IsSetChange(const kolo::v1::TensorMeta& m) { return kolo::IsSetChange(KindOf(m)); }

bool IsJoin(const kolo::v1::TensorMeta& m) { return KindOf(m) == CollectiveKind::kJoin; }

}  // namespace

Coordinator::Coordinator(std::string job_id, std::string token, int size,
                         CoordinatorOptions options)
    : job_id_(std::move(job_id)),
      token_(std::move(token)),
      size_(size),
      options_(options),
      lane_(std::make_shared<PlanLane>()),
      sets_(size) {
  rank_owner_.assign(size, -1);
}

void Coordinator::UseLane(MessageLane* lane) { lane_->Use(lane); }

void Coordinator::OnLaneMessage(int node_index, absl::string_view message) {
  int member;
  std::string node;
  {
    absl::MutexLock l(&mu_);
    if (!welcomed_ || node_index < 0 || node_index >= static_cast<int>(node_members_.size())) {
      return;
    }
    member = node_members_[node_index];
    node = DescribeNode(node_index);
  }
  kolo::v1::MemberMessage msg;
  if (!msg.ParseFromArray(message.data(), static_cast<int>(message.size())) || !msg.has_ready()) {
    // It came sealed from that daemon (sealed_lane.h): dropping it would
    // leave its names waiting for ever, so the job ends, saying why.
    OnAbort(member, absl::InternalError(absl::StrCat(
                        node, " sent a negotiation message of ", message.size(),
                        " bytes over the data plane that is not a readable Ready report")));
    return;
  }
  {
    absl::MutexLock l(&mu_);
    Member& m = members_.at(member);
    if (m.lane_sink == nullptr) m.lane_sink = std::make_shared<PlanLaneSink>(lane_, node_index, m.sink);
  }
  OnReady(member, msg.ready());
}

bool Coordinator::HasToken(const std::string& token) const { return SecretsEqual(token, token_); }

void Coordinator::Deliver(absl::ReleasableMutexLock& state, Outbox* out) {
  // Taken before the state lock is let go: the next state change waits for
  // this delivery, so every sink sees messages in the order of the changes
  // (two plans sent in opposite orders to two nodes would make them execute
  // different responses under the same sequence number).
  absl::MutexLock order(&deliver_mu_);
  state.Release();
  for (auto& [sink, msg] : *out) sink->Send(std::move(msg));
  out->clear();
}

std::string Coordinator::DescribeNode(int node_index) const {
  if (node_index < 0 || node_index >= static_cast<int>(node_members_.size())) {
    return "an unknown node";
  }
  const Member& m = members_.at(node_members_[node_index]);
  return absl::StrCat("ranks ", FormatRankRanges(m.ranks), " (node ", m.node, ")");
}

absl::StatusOr<int> Coordinator::AddMember(const kolo::v1::Hello& hello,
                                           std::shared_ptr<MemberSink> sink) {
  Outbox out;
  absl::ReleasableMutexLock l(&mu_);
  if (aborted_) {
    return absl::AbortedError(absl::StrCat("job ", job_id_, " was aborted"));
  }
  if (!SecretsEqual(hello.job_token(), token_)) {
    return absl::PermissionDeniedError(
        absl::StrCat("job ", job_id_, ": node ", hello.node(), " presented a wrong job token"));
  }
  if (hello.size() != size_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id_, " has size ", size_, ", node ", hello.node(), " says ", hello.size()));
  }
  if (welcomed_) {
    return absl::AlreadyExistsError(absl::StrCat("job ", job_id_, " already has all its nodes"));
  }
  std::vector<int> ranks(hello.ranks().begin(), hello.ranks().end());
  std::sort(ranks.begin(), ranks.end());
  if (ranks.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("node ", hello.node(), " hosts no rank"));
  }
  for (int r : ranks) {
    if (r < 0 || r >= size_ || rank_owner_[r] != -1) {
      return absl::AlreadyExistsError(absl::StrCat("job ", job_id_, ": node ", hello.node(),
                                                   " claims rank ", r,
                                                   ", which is out of range or hosted elsewhere"));
    }
  }
  const int member_id = next_member_++;
  for (int r : ranks) rank_owner_[r] = member_id;
  Member m;
  m.node = hello.node();
  m.ranks = std::move(ranks);
  m.ucx_address = hello.ucx_address();
  m.sink = std::move(sink);
  m.last_heard = absl::Now();
  members_[member_id] = std::move(m);
  if (std::all_of(rank_owner_.begin(), rank_owner_.end(), [](int o) { return o >= 0; })) {
    WelcomeLocked(&out);
  }
  Deliver(l, &out);
  return member_id;
}

void Coordinator::WelcomeLocked(Outbox* out) {
  welcomed_ = true;
  // The node hosting rank 0 first, then by lowest rank: the same order on
  // every daemon, so node indices mean the same everywhere.
  std::vector<int> ids;
  for (const auto& [id, m] : members_) ids.push_back(id);
  std::sort(ids.begin(), ids.end(), [this](int a, int b) {
    return members_.at(a).ranks.front() < members_.at(b).ranks.front();
  });
  node_members_ = ids;
  kolo::v1::Welcome welcome;
  // Without a key (no randomness to be had) the nodes negotiate over the
  // Peer plane only.
  if (absl::StatusOr<std::string> key = NewLaneKey(); key.ok()) {
    welcome.set_lane_key(*std::move(key));
  } else {
    spdlog::warn(
        "job {}: no key for the data plane's messages, so the job negotiates over the "
        "Peer plane only: {}",
        job_id_, key.status().ToString());
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    Member& m = members_.at(ids[i]);
    m.node_index = static_cast<int>(i);
    auto* e = welcome.add_nodes();
    e->set_node(m.node);
    for (int r : m.ranks) e->add_ranks(r);
    e->set_ucx_address(m.ucx_address);
  }
  for (int id : ids) {
    auto msg = std::make_shared<kolo::v1::CoordinatorMessage>();
    *msg->mutable_welcome() = welcome;
    msg->mutable_welcome()->set_node_index(members_.at(id).node_index);
    out->push_back({members_.at(id).sink, std::move(msg)});
  }
  for (auto& [id, readies] : early_) {
    for (const auto& ready : readies) {
      if (ready.has_devices() && !members_.at(id).has_devices) {
        members_.at(id).has_devices = true;
        members_.at(id).devices = ready.devices();
      }
      int node = members_.at(id).node_index;
      for (const auto& meta : ready.tensors()) AddReadyLocked(node, meta);
    }
  }
  early_.clear();
  PlanLocked(out);
}

std::vector<int> Coordinator::JoinedNodesOfSetLocked(int process_set) const {
  std::vector<int> out;
  if (!joins_.any()) return out;  // the usual case: nobody has joined
  const std::vector<int>& members = sets_.MembersOrAll(process_set);
  for (int n = 0; n < joins_.size(); ++n) {
    if (!joins_.joined(n)) continue;
    for (int r : members_.at(node_members_[n]).ranks) {
      if (std::binary_search(members.begin(), members.end(), r)) {
        out.push_back(n);
        break;
      }
    }
  }
  return out;
}

absl::Status Coordinator::JoinedErrorLocked(const Pending& p,
                                            const std::vector<int>& joined_nodes) const {
  const kolo::v1::TensorMeta& m = p.meta;
  const auto kind = static_cast<CollectiveKind>(m.kind());
  auto refuse = [&](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat(CollectiveKindName(kind), " \"", m.name(), "\": ", why));
  };
  const std::vector<int>& members = sets_.MembersOrAll(m.process_set());
  plan::JoinedRanks joined{p.joined, {}};
  for (int n : joined_nodes) {
    for (int r : members_.at(node_members_[n]).ranks) {
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
  if (Traits(kind).rooted) {
    const int root = m.root_rank();
    bool root_joined = false;
    for (int n : joined_nodes) {
      const std::vector<int>& ranks = members_.at(node_members_[n]).ranks;
      root_joined = root_joined || std::binary_search(ranks.begin(), ranks.end(), root);
    }
    return plan::CheckRootNotJoined(m.name(), root, root_joined);
  }
  return absl::OkStatus();
}

int Coordinator::NodesOfSetLocked(int process_set) const {
  const std::vector<int>* ranks = sets_.Members(process_set);
  if (process_set == 0 || ranks == nullptr) return static_cast<int>(node_members_.size());
  std::vector<bool> hosts(node_members_.size(), false);
  for (int r : *ranks) {
    const int member = rank_owner_[r];
    if (member >= 0) hosts[members_.at(member).node_index] = true;
  }
  return static_cast<int>(std::count(hosts.begin(), hosts.end(), true));
}

void Coordinator::AddReadyLocked(int node, const kolo::v1::TensorMeta& meta) {
  const int nodes = static_cast<int>(node_members_.size());
  if (IsJoin(meta)) {
    // Every rank of `node` has joined: it reports nothing more until the
    // join completes, and the others stop waiting for it.
    if (joins_.size() != nodes) joins_.Reset(nodes);
    if (joins_.joined(node)) return;
    SpillCachedRoundsLocked();
    joins_.Join(node, meta.aux_size() > 0 ? static_cast<int>(meta.aux(0)) : joins_.last_rank());
    std::vector<std::string> keys;
    for (const auto& [key, pending] : pending_) keys.push_back(key);
    std::sort(keys.begin(), keys.end());  // the same order on every run
    for (const std::string& key : keys) MaybeCompleteLocked(key);
    if (joins_.all()) {
      kolo::v1::TensorMeta done = meta;
      done.clear_aux();
      done.add_aux(joins_.last_rank());
      ready_.push_back(ReadyName{done, absl::OkStatus(), {}});
      joins_.Reset();
    }
    return;
  }
  if (meta.process_set() != 0 && !IsSetChange(meta) && !sets_.Contains(meta.process_set())) {
    // Removed (or never made): nobody else will report it.
    ready_.push_back(
        ReadyName{meta,
                  absl::FailedPreconditionError(absl::StrCat("process set ", meta.process_set(),
                                                             " does not exist (it was removed)")),
                  {}});
    return;
  }
  std::string key = PeerKey(meta.process_set(), meta.name());
  if (counted_rounds_ > 0) {
    // A full report of a name other nodes reported by bit.
    if (auto c = cache_ids_.find(key); c != cache_ids_.end()) SpillCachedRoundLocked(c->second);
  }
  auto [it, inserted] = pending_.try_emplace(std::move(key));
  Pending& p = it->second;
  if (inserted) {
    p.meta = meta;
    p.desc = plan::DescOf(meta);
    p.first_node = node;
    p.reported.assign(nodes, false);
  }
  if (p.reported[node]) return;
  p.reported[node] = true;
  ++p.count;
  // A count of this node's ranks that had joined; anything else (a broken
  // or hostile member) fails the name, and the sum stays within the job.
  const int node_ranks = static_cast<int>(members_.at(node_members_[node]).ranks.size());
  if (meta.joined() >= 0 && meta.joined() <= node_ranks) {
    p.joined += meta.joined();
  } else if (p.error.ok()) {
    p.error = absl::InvalidArgumentError(
        absl::StrCat(DescribeNode(node), " reported ", meta.joined(), " of its ", node_ranks,
                     " ranks as joined for \"", meta.name(), "\""));
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
      p.error = plan::Disagreement(p.desc.kind, meta.name(), DescribeNode(p.first_node),
                                   DescribeNode(node), *d);
    }
  }
  MaybeCompleteLocked(it->first);
}

void Coordinator::AddCachedLocked(int node, uint32_t id, bool anyone_joined) {
  CachedRound& c = cached_rounds_[id];
  if (anyone_joined || (c.process_set != 0 && !sets_.Contains(c.process_set)) ||
      (!pending_.empty() && pending_.contains(cache_names_[id]))) {
    AddReadyLocked(node, cache_meta_[id]);
    return;
  }
  if (c.reported[node] != 0) return;
  c.reported[node] = 1;
  if (c.count++ == 0) ++counted_rounds_;
  if (c.count < c.expected) return;
  ready_.push_back(ReadyName{cache_meta_[id], absl::OkStatus(), {}});
  std::fill(c.reported.begin(), c.reported.end(), 0);
  c.count = 0;
  --counted_rounds_;
}

void Coordinator::SpillCachedRoundLocked(uint32_t id) {
  CachedRound& c = cached_rounds_[id];
  if (c.count == 0) return;
  std::vector<uint8_t> reported(c.reported.size(), 0);
  reported.swap(c.reported);
  c.count = 0;
  --counted_rounds_;
  for (size_t n = 0; n < reported.size(); ++n) {
    if (reported[n] != 0) AddReadyLocked(static_cast<int>(n), cache_meta_[id]);
  }
}

void Coordinator::SpillCachedRoundsLocked() {
  for (uint32_t id = 0; id < cached_rounds_.size() && counted_rounds_ > 0; ++id) {
    SpillCachedRoundLocked(id);
  }
}

void Coordinator::MaybeCompleteLocked(const std::string& key) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  const kolo::v1::TensorMeta& meta = p.meta;
  const int nodes = static_cast<int>(node_members_.size());
  // Nodes fully joined that did not report it take part with zeros.
  std::vector<int> joined;
  for (int n : JoinedNodesOfSetLocked(meta.process_set())) {
    if (!p.reported[n]) joined.push_back(n);
  }
  if (p.count + static_cast<int>(joined.size()) < NodesOfSetLocked(meta.process_set())) return;
  if (!p.rows.empty() || !p.splits.empty()) {
    // Allgather and alltoall only: the ranks of the set (every rank for set
    // 0), ascending; each node reported rows or splits for its ranks among
    // them, ascending.
    const std::vector<int>& members = sets_.MembersOrAll(meta.process_set());
    std::vector<int> position(size_, -1);
    for (size_t m = 0; m < members.size(); ++m) position[members[m]] = static_cast<int>(m);
    auto node_ranks = [&](int n) {
      std::vector<int> out;
      for (int r : members_.at(node_members_[n]).ranks) {
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
              absl::StrCat("allgather \"", meta.name(), "\": ", DescribeNode(n), " sent ",
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
          p.error = absl::FailedPreconditionError(absl::StrCat(
              "alltoall \"", meta.name(), "\": ", DescribeNode(n), " sent ", p.splits[n].size(),
              " splits for ", ranks.size(), " ranks of a set of ", k));
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
  if (p.error.ok() && (p.joined > 0 || !joined.empty())) {
    p.error = JoinedErrorLocked(p, joined);
  }
  ready_.push_back(ReadyName{p.meta, p.error, joined});
  pending_.erase(it);
}

void Coordinator::OnReady(int member, const kolo::v1::Ready& ready) {
  Outbox out;
  absl::ReleasableMutexLock l(&mu_);
  auto it = members_.find(member);
  if (it == members_.end() || aborted_) return;
  it->second.last_heard = absl::Now();
  if (!welcomed_) {
    kolo::v1::Ready copy = ready;
    // Cached bits need the node index; none exist before the welcome.
    copy.clear_cached_bits();
    early_[member].push_back(std::move(copy));
    return;
  }
  if (ready.has_devices() && !it->second.has_devices) {
    it->second.has_devices = true;
    it->second.devices = ready.devices();
  }
  int node = it->second.node_index;
  for (const auto& meta : ready.tensors()) {
    if (!IsJoin(meta)) AddReadyLocked(node, meta);
  }
  const std::string& bits = ready.cached_bits();
  const bool anyone_joined = joins_.any();
  for (size_t byte = 0; byte < bits.size(); ++byte) {
    for (unsigned b = static_cast<unsigned char>(bits[byte]); b != 0; b &= b - 1) {
      const size_t id = byte * 8 + static_cast<size_t>(__builtin_ctz(b));
      if (id < cache_names_.size()) AddCachedLocked(node, static_cast<uint32_t>(id), anyone_joined);
    }
  }
  // A node's join comes after every name it reported before it.
  for (const auto& meta : ready.tensors()) {
    if (IsJoin(meta)) AddReadyLocked(node, meta);
  }
  PlanLocked(&out);
  Deliver(l, &out);
}

void Coordinator::PlanLocked(Outbox* out) {
  if (ready_.empty()) return;
  kolo::v1::Plan plan;
  // Step 1: group the fusable names once; group_of[i] is the group whose
  // first name is ready_[i].
  std::vector<size_t> fusable;  // indices into ready_
  std::vector<plan::FusionCandidate> candidates;
  for (size_t i = 0; i < ready_.size(); ++i) {
    const ReadyName& r = ready_[i];
    if (!r.error.ok() || IsSetChange(r.meta) || IsJoin(r.meta)) continue;
    fusable.push_back(i);
    candidates.push_back({plan::DescOf(r.meta), r.joined_nodes});
  }
  std::vector<std::vector<size_t>> group_of(ready_.size());
  for (const plan::FusionGroup& g :
       plan::GroupForFusion(candidates, options_.fusion_threshold_bytes)) {
    std::vector<size_t>& names = group_of[fusable[g.members.front()]];
    for (size_t m : g.members) names.push_back(fusable[m]);
  }
  // Step 2: responses in the order of their first name. A fusable name not
  // first in its group was planned with its group.
  std::vector<kolo::v1::PlannedResponse*> device_responses;
  for (size_t i = 0; i < ready_.size(); ++i) {
    const ReadyName& r = ready_[i];
    if (!r.error.ok()) {
      AddErrorResponse(r.meta, r.error, &plan);
    } else if (IsSetChange(r.meta)) {
      AddSetChangeLocked(r.meta, &plan);
    } else if (IsJoin(r.meta)) {
      AddJoinResponse(r.meta, &plan);
    } else if (!group_of[i].empty()) {
      kolo::v1::PlannedResponse* response = AddFusedResponseLocked(group_of[i], &plan);
      if (r.meta.device()) device_responses.push_back(response);
    }
  }
  ready_.clear();
  // Steps 3 and 4.
  AttachDeviceCommLocked(device_responses);
  SendPlanLocked(std::move(plan), out);
}

void Coordinator::AddErrorResponse(const kolo::v1::TensorMeta& meta, const absl::Status& error,
                                   kolo::v1::Plan* plan) {
  auto* r = plan->add_responses();
  r->add_members()->set_name(meta.name());
  r->set_process_set(meta.process_set());
  r->set_error_code(static_cast<int>(error.code()));
  r->set_error_message(std::string(error.message()));
  // A failed name never enters the cache: its metadata was not agreed.
}

void Coordinator::AddSetChangeLocked(const kolo::v1::TensorMeta& meta, kolo::v1::Plan* plan) {
  absl::StatusOr<int> new_set = ChangeSetLocked(meta, plan);
  if (!new_set.ok()) {
    AddErrorResponse(meta, new_set.status(), plan);
    return;
  }
  // In plan order on every node: each registers (or drops) the set then.
  auto* r = plan->add_responses();
  AddMemberLocked(meta, r, plan);
  r->set_new_process_set(*new_set);
}

void Coordinator::AddJoinResponse(const kolo::v1::TensorMeta& meta, kolo::v1::Plan* plan) {
  auto* r = plan->add_responses();
  r->add_members()->set_name(meta.name());
  r->set_process_set(-1);  // the join's own key on the nodes
  r->set_last_joined(static_cast<int32_t>(meta.aux_size() > 0 ? meta.aux(0) : -1));
}

kolo::v1::PlannedResponse* Coordinator::AddFusedResponseLocked(const std::vector<size_t>& names,
                                                               kolo::v1::Plan* plan) {
  auto* response = plan->add_responses();
  // The group's names share their process set and joined nodes.
  const ReadyName& first = ready_[names.front()];
  response->set_process_set(first.meta.process_set());
  for (int n : first.joined_nodes) response->add_joined_nodes(n);
  for (size_t i : names) {
    const kolo::v1::TensorMeta& meta = ready_[i].meta;
    // Nodes whose ranks all joined never saw this tensor: they lay the
    // response out from its metadata.
    if (!first.joined_nodes.empty()) *response->add_metas() = meta;
    AddMemberLocked(meta, response, plan);
    // Allgather and alltoall are never fused: their one member's rows.
    if (ReportsRows(KindOf(meta))) *response->mutable_rows() = meta.rows();
    if (Traits(KindOf(meta)).splits) *response->mutable_splits() = meta.splits();
  }
  return response;
}

void Coordinator::AddMemberLocked(const kolo::v1::TensorMeta& meta,
                                  kolo::v1::PlannedResponse* response, kolo::v1::Plan* plan) {
  auto* m = response->add_members();
  const std::string key = PeerKey(meta.process_set(), meta.name());
  auto c = cache_ids_.find(key);
  if (c != cache_ids_.end()) {
    m->set_cache_id(c->second);
    return;
  }
  m->set_name(meta.name());
  // An allgather's rows and an alltoall's splits change from step to step:
  // never a cache bit.
  if (HasPerRankRows(KindOf(meta)) || IsSetChange(meta) ||
      cache_names_.size() >= options_.cache_capacity) {
    return;
  }
  const uint32_t id = static_cast<uint32_t>(cache_names_.size());
  cache_ids_[key] = id;
  cache_names_.push_back(key);
  cache_meta_.push_back(meta);
  // A cache bit stands for the metadata, not for the first node's
  // circumstances.
  cache_meta_.back().clear_joined();
  cache_meta_.back().clear_local_error();
  cached_rounds_.push_back(CachedRound{std::vector<uint8_t>(node_members_.size(), 0), 0,
                                       NodesOfSetLocked(meta.process_set()), meta.process_set()});
  auto* a = plan->add_new_cache_ids();
  a->set_name(meta.name());
  a->set_process_set(meta.process_set());
  a->set_cache_id(id);
}

void Coordinator::AttachDeviceCommLocked(
    const std::vector<kolo::v1::PlannedResponse*>& device_responses) {
  for (kolo::v1::PlannedResponse* response : device_responses) {
    if (!device_comm_planned_) {
      device_comm_planned_ = true;
      absl::StatusOr<kolo::v1::DeviceComm> comm = MakeDeviceCommLocked();
      if (comm.ok()) {
        *response->mutable_device_comm() = *std::move(comm);
        continue;
      }
      device_comm_error_ =
          absl::Status(comm.status().code(), absl::StrCat("job ", job_id_,
                                                          ": no NCCL communicator for device "
                                                          "tensors: ",
                                                          comm.status().message()));
    }
    if (!device_comm_error_.ok()) {
      response->set_error_code(static_cast<int>(device_comm_error_.code()));
      response->set_error_message(std::string(device_comm_error_.message()));
    }
  }
}

void Coordinator::SendPlanLocked(kolo::v1::Plan plan, Outbox* out) {
  plan.set_sequence(plans_++);
  auto msg = std::make_shared<kolo::v1::CoordinatorMessage>();
  *msg->mutable_plan() = std::move(plan);
  for (const auto& [id, m] : members_) {
    if (m.connected) out->push_back({m.lane_sink != nullptr ? m.lane_sink : m.sink, msg});
  }
}

absl::StatusOr<int> Coordinator::ChangeSetLocked(const kolo::v1::TensorMeta& meta,
                                                 kolo::v1::Plan* plan) {
  if (KindOf(meta) == CollectiveKind::kRemoveProcessSet) {
    const int64_t aux = meta.aux_size() == 1 ? meta.aux(0) : 0;
    const int id = aux > 0 && aux <= INT32_MAX ? static_cast<int>(aux) : 0;
    if (absl::Status removed = sets_.Remove(id); !removed.ok()) {
      return absl::Status(removed.code(), absl::StrCat("remove_process_set \"", meta.name(),
                                                       "\": ", removed.message()));
    }
    // Its names still waiting fail on every node that has them.
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.meta.process_set() != id) {
        ++it;
        continue;
      }
      AddErrorResponse(
          it->second.meta,
          absl::FailedPreconditionError(absl::StrCat("process set ", id, " was removed")), plan);
      pending_.erase(it++);
    }
    return 0;
  }
  return sets_.Add(std::vector<int64_t>(meta.aux().begin(), meta.aux().end()));
}

absl::StatusOr<kolo::v1::DeviceComm> Coordinator::MakeDeviceCommLocked() {
  std::vector<RankDevices> nodes;
  for (int member : node_members_) {
    const Member& m = members_.at(member);
    if (!m.has_devices) {
      return absl::InternalError(
          absl::StrCat("node ", m.node, " sent a device tensor without its GPU layout"));
    }
    const kolo::v1::DeviceLayout& layout = m.devices;
    if (layout.ranks_size() != layout.devices_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", m.node, " sent a malformed GPU layout"));
    }
    RankDevices placed;
    for (int i = 0; i < layout.ranks_size(); ++i) {
      const int rank = layout.ranks(i);
      if (rank < 0 || rank >= size_ || rank_owner_[rank] != member) {
        return absl::InvalidArgumentError(
            absl::StrCat("node ", m.node, " placed rank ", rank, ", which it does not host"));
      }
      placed.emplace_back(rank, layout.devices(i));
    }
    nodes.push_back(std::move(placed));
  }
  if (!options_.new_device_comm_id) {
    return absl::UnimplementedError("the coordinating kolod cannot make NCCL communicators");
  }
  absl::StatusOr<std::string> id = options_.new_device_comm_id();
  if (!id.ok()) return id.status();
  absl::StatusOr<DeviceCommPlan> plan = MakeDeviceCommPlan(size_, nodes, *std::move(id));
  if (!plan.ok()) return plan.status();
  kolo::v1::DeviceComm comm;
  comm.set_unique_id(plan->unique_id);
  comm.set_nranks(plan->nranks);
  for (int r : plan->nccl_rank) comm.add_nccl_rank(r);
  for (int d : plan->device) comm.add_device(d);
  return comm;
}

void Coordinator::AbortLocked(const absl::Status& why, Outbox* out) {
  if (aborted_) return;
  aborted_ = true;
  aborted_flag_.store(true);
  auto msg = std::make_shared<kolo::v1::CoordinatorMessage>();
  ToPeerAbort(why, msg->mutable_abort());
  msg->mutable_abort()->set_plans_sent(plans_);
  for (const auto& [id, m] : members_) {
    if (m.connected) out->push_back({m.sink, msg});
  }
}

void Coordinator::MemberLost(int member, const std::string& why) {
  Outbox out;
  absl::ReleasableMutexLock l(&mu_);
  auto it = members_.find(member);
  if (it == members_.end()) return;
  it->second.connected = false;
  std::string who =
      absl::StrCat("ranks ", FormatRankRanges(it->second.ranks), " (node ", it->second.node, ")");
  AbortLocked(absl::AbortedError(absl::StrCat("job ", job_id_, ": ", who, " left the job: ", why)),
              &out);
  Deliver(l, &out);
}

void Coordinator::OnAbort(int member, const absl::Status& why) {
  Outbox out;
  absl::ReleasableMutexLock l(&mu_);
  AbortLocked(why, &out);
  Deliver(l, &out);
}

void Coordinator::Heartbeat(int member) {
  absl::MutexLock l(&mu_);
  auto it = members_.find(member);
  if (it != members_.end()) it->second.last_heard = absl::Now();
}

bool Coordinator::Tick(absl::Time now, absl::Duration timeout) {
  Outbox out;
  absl::ReleasableMutexLock l(&mu_);
  for (const auto& [id, m] : members_) {
    if (aborted_) break;
    if (m.connected && now - m.last_heard > timeout) {
      AbortLocked(absl::AbortedError(absl::StrCat(
                      "job ", job_id_, ": ranks ", FormatRankRanges(m.ranks), " (node ", m.node,
                      ") sent nothing for ", absl::ToInt64Seconds(timeout),
                      " s: its daemon is stopped, hung or cut off")),
                  &out);
    }
  }
  if (!aborted_) {
    auto msg = std::make_shared<kolo::v1::CoordinatorMessage>();
    msg->mutable_heartbeat();
    for (const auto& [id, m] : members_) {
      if (m.connected) out.push_back({m.sink, msg});
    }
  }
  const bool alive = !aborted_;
  Deliver(l, &out);
  return alive;
}

bool Coordinator::aborted() const { return aborted_flag_.load(); }

int Coordinator::members() const {
  absl::MutexLock l(&mu_);
  int n = 0;
  for (const auto& [id, m] : members_) n += m.connected ? 1 : 0;
  return n;
}

}  // namespace kolo::daemon
