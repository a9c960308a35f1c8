#include "daemon/multinode/node_group.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "daemon/algorithms/allgather.h"
#include "daemon/algorithms/allreduce.h"
#include "daemon/algorithms/broadcast.h"
#include "daemon/algorithms/collective_common.h"
#include "daemon/session.h"
#include "daemon/transport/ucx_transport.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/reduce.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

constexpr uint64_t kAlign = 64;
// Transfers fail by abort (peer loss is detected by heartbeats), so their
// own deadline is only a backstop.
constexpr absl::Duration kTransferDeadline = absl::Minutes(30);
// How long the responses already planned may go on after the job ended.
constexpr absl::Duration kAbortGrace = absl::Seconds(5);

uint64_t Align(uint64_t v) { return (v + kAlign - 1) & ~(kAlign - 1); }

// Lays the tensors of a response out in the fusion buffer as every node
// does: same order, each member 64-byte aligned. Returns where the last one
// ends (no trailing padding: a single tensor is exactly its bytes, so a node
// may reduce it in place while another goes through its fusion buffer).
uint64_t LayOut(const std::vector<ReadySet>& sets, std::vector<uint64_t>* offsets) {
  uint64_t total = 0;
  for (const ReadySet& s : sets) {
    total = Align(total);
    offsets->push_back(total);
    total += s.requests.front().bytes;
  }
  return total;
}

kolo::v1::TensorMeta MetaOf(const ReadySet& set, int size) {
  const Request& r = set.requests.front();
  kolo::v1::TensorMeta m;
  m.set_name(set.name);
  m.set_kind(static_cast<uint32_t>(r.kind));
  m.set_dtype(static_cast<uint32_t>(r.dtype));
  m.set_op(static_cast<uint32_t>(r.op));
  for (int64_t d : r.shape) m.add_shape(d);
  m.set_prescale(r.prescale);
  m.set_postscale(r.postscale);
  m.set_root_rank(r.root_rank);
  m.set_bytes(r.bytes);
  m.set_device(r.device.has_value());
  m.set_process_set(set.process_set);
  m.set_joined(set.joined);
  if (r.kind == CollectiveKind::kJoin && !r.aux.empty()) m.add_aux(r.aux.front());
  if (r.kind == CollectiveKind::kAddProcessSet || r.kind == CollectiveKind::kRemoveProcessSet) {
    for (int64_t v : r.aux) m.add_aux(v);
  }
  m.set_compression(static_cast<uint32_t>(r.compression));
  if (r.kind == CollectiveKind::kAllgather) {
    std::vector<const Request*> by_rank;
    for (const Request& q : set.requests) by_rank.push_back(&q);
    std::sort(by_rank.begin(), by_rank.end(),
              [](const Request* a, const Request* b) { return a->rank < b->rank; });
    for (const Request* q : by_rank) m.add_rows(q->shape.empty() ? 0 : q->shape[0]);
  }
  if (r.kind == CollectiveKind::kAlltoall) {
    std::vector<const Request*> by_rank;
    for (const Request& q : set.requests) by_rank.push_back(&q);
    std::sort(by_rank.begin(), by_rank.end(),
              [](const Request* a, const Request* b) { return a->rank < b->rank; });
    for (const Request* q : by_rank) {
      if (!q->aux.empty()) {
        for (int64_t v : q->aux) m.add_splits(v);
      } else {
        // Even splits among the set's ranks (the job checked they divide).
        const int n = set.set_size > 0 ? set.set_size : size;
        const int64_t rows = q->shape.empty() ? 0 : q->shape[0];
        for (int j = 0; j < n; ++j) m.add_splits(n > 0 ? rows / n : 0);
      }
    }
  }
  if (!set.agreement.ok()) m.set_local_error(std::string(set.agreement.message()));
  return m;
}

// Where this node's ranks keep the device tensors of `set`.
kolo::v1::DeviceLayout LayoutOf(const ReadySet& set) {
  kolo::v1::DeviceLayout layout;
  for (const Request& r : set.requests) {
    if (!r.device.has_value()) continue;
    layout.add_ranks(r.rank);
    layout.add_devices(r.device->input.device);
  }
  return layout;
}


}  // namespace

NodeGroup::NodeGroup(NodeGroupOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<NodeGroup>> NodeGroup::Start(NodeGroupOptions options) {
  std::unique_ptr<NodeGroup> g(new NodeGroup(std::move(options)));
  auto transport = UcxTransport::Create(UcxOptions{});
  if (!transport.ok()) return transport.status();
  std::string address = (*transport)->worker_address();
  g->transport_ = std::move(*transport);

  std::unique_ptr<PeerChannel> channel;
  std::string coordinator_name;
  if (g->options_.local_coordinator) {
    channel = LocalPeer(g->options_.coordinators->GetOrCreate(
        g->options_.job_id, g->options_.job_token, g->options_.size));
    coordinator_name = absl::StrCat(g->options_.node_name, " (this node)");
  } else {
    auto c = ConnectPeer(g->options_.coordinator_address, g->options_.connect_timeout);
    if (!c.ok()) return c.status();
    channel = std::move(*c);
    coordinator_name = g->options_.coordinator_address;
  }
  MemberLinkOptions link;
  link.hello.set_job_id(g->options_.job_id);
  link.hello.set_job_token(g->options_.job_token);
  link.hello.set_node(g->options_.node_name);
  link.hello.set_size(g->options_.size);
  for (int r : g->options_.local_ranks) link.hello.add_ranks(r);
  link.hello.set_ucx_address(address);
  link.peer_timeout = g->options_.peer_timeout;
  link.coordinator_name = coordinator_name;
  g->executor_ = std::thread([p = g.get()] { p->ExecuteLoop(); });
  g->transport_aborter_ = std::thread([p = g.get()] { p->AbortTransportLoop(); });
  auto l = MemberLink::Start(std::move(channel), std::move(link), g.get());
  if (!l.ok()) return l.status();
  {
    absl::MutexLock lock(&g->mu_);
    g->link_ = std::move(*l);
  }
  return g;
}

NodeGroup::~NodeGroup() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    if (aborted_.ok()) aborted_ = absl::CancelledError("the job ended on this node");
  }
  if (transport_) transport_->Abort(absl::CancelledError("the job ended on this node"));
  if (transport_aborter_.joinable()) transport_aborter_.join();
  if (executor_.joinable()) executor_.join();
  std::unique_ptr<MemberLink> link;
  {
    absl::MutexLock l(&mu_);
    link = std::move(link_);
  }
  link.reset();  // joins the link's threads, which may call back into us
}

void NodeGroup::LocallyReady(ReadySet set) {
  kolo::v1::TensorMeta meta = MetaOf(set, options_.size);
  std::optional<kolo::v1::DeviceLayout> devices;
  if (meta.device()) devices = LayoutOf(set);
  MemberLink* link;
  {
    absl::MutexLock l(&mu_);
    if (!aborted_.ok()) {
      absl::Status why = aborted_;
      std::vector<ReadySet> one;
      one.push_back(std::move(set));
      mu_.Unlock();
      Complete(one, why);
      mu_.Lock();
      return;
    }
    const std::string key = PeerKey(set.process_set, set.name);
    if (parked_.contains(key)) {
      // The job refuses a name in flight; one that slipped through between
      // its check and here must not replace (and so lose) the first.
      absl::Status dup = absl::AlreadyExistsError(absl::StrCat(
          CollectiveKindName(set.requests.front().kind), " \"", set.name,
          "\": submitted again while still in flight"));
      std::vector<ReadySet> one;
      one.push_back(std::move(set));
      mu_.Unlock();
      Complete(one, dup);
      mu_.Lock();
      return;
    }
    parked_[key] = std::move(set);
    link = link_.get();
  }
  if (link != nullptr) link->ReportReady(meta, devices ? &*devices : nullptr);
}

std::vector<NodeGroup::Parked> NodeGroup::ParkedNames() {
  absl::MutexLock l(&mu_);
  std::vector<Parked> out;
  for (const auto& [key, set] : parked_) {
    out.push_back(Parked{set.name, set.requests.front().kind, set.first_submitted});
  }
  return out;
}

bool NodeGroup::IsParked(int process_set, const std::string& name) {
  absl::MutexLock l(&mu_);
  return parked_.contains(PeerKey(process_set, name));
}

void NodeGroup::Abort(const absl::Status& why) {
  MemberLink* link;
  {
    absl::MutexLock l(&mu_);
    if (!aborted_.ok()) return;
    aborted_ = why;
    link = link_.get();
  }
  if (link != nullptr) link->Abort(std::string(why.message()));
}

void NodeGroup::AbortTransportLoop() {
  absl::Status why;
  {
    absl::MutexLock l(&mu_);
    auto ended = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_ || !aborted_.ok(); };
    mu_.Await(absl::Condition(&ended));
    if (stop_) return;
    // The plan received so far may still complete: when another node ends
    // the job because its ranks finished, they had everything they needed,
    // and this node's last responses need only the nodes still running.
    auto idle = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return stop_ || (!executing_ && plan_.empty());
    };
    mu_.AwaitWithTimeout(absl::Condition(&idle), kAbortGrace);
    why = aborted_;
  }
  transport_->Abort(why);
}

void NodeGroup::OnWelcome(const kolo::v1::Welcome& welcome) {
  std::vector<std::string> addresses;
  {
    absl::MutexLock l(&mu_);
    rank_node_.assign(options_.size, -1);
    for (int n = 0; n < welcome.nodes_size(); ++n) {
      addresses.push_back(welcome.nodes(n).ucx_address());
      for (int r : welcome.nodes(n).ranks()) {
        if (r >= 0 && r < options_.size) rank_node_[r] = n;
      }
    }
  }
  absl::Status s = static_cast<UcxTransport*>(transport_.get())
                       ->Connect(addresses, welcome.node_index());
  if (!s.ok()) {
    OnLinkAbort(absl::StrCat("node ", options_.node_name, " could not reach the others: ",
                             s.message()));
    return;
  }
  absl::MutexLock l(&mu_);
  welcomed_ = true;
  spdlog::info("job {}: node {} is node {} of {}", options_.job_id, options_.node_name,
               welcome.node_index(), welcome.nodes_size());
}

void NodeGroup::OnPlan(std::vector<PlannedEntry> plan) {
  absl::MutexLock l(&mu_);
  for (auto& e : plan) plan_.push_back(std::move(e));
}

void NodeGroup::OnLinkAbort(const std::string& reason) {
  absl::Status why = absl::AbortedError(reason);
  {
    absl::MutexLock l(&mu_);
    if (!aborted_.ok()) return;
    aborted_ = why;
  }
  spdlog::warn("job {}: {}", options_.job_id, reason);
  options_.abort_job(why);
}

void NodeGroup::ExecuteLoop() {
  for (;;) {
    PlannedEntry entry;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stop_ || (welcomed_ && !plan_.empty()) || (!aborted_.ok() && !parked_.empty());
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      if (!aborted_.ok() && plan_.empty()) {
        // Fail what is parked: nothing will be planned any more.
        std::vector<ReadySet> left;
        for (auto& [name, set] : parked_) left.push_back(std::move(set));
        parked_.clear();
        absl::Status why = aborted_;
        mu_.Unlock();
        Complete(left, why);
        mu_.Lock();
        continue;
      }
      entry = std::move(plan_.front());
      plan_.pop_front();
      executing_ = true;
    }
    Execute(std::move(entry));
    absl::MutexLock l(&mu_);
    executing_ = false;
  }
}

void NodeGroup::Complete(std::vector<ReadySet>& sets, const absl::Status& status) {
  std::map<Session*, std::vector<Completion>> by_session;
  for (const ReadySet& set : sets) {
    for (const Request& r : set.requests) {
      by_session[r.session.get()].push_back(Completion{r.request_id, status});
    }
  }
  for (auto& [s, cs] : by_session) s->Complete(cs);
}

void NodeGroup::Execute(PlannedEntry entry) {
  // Which nodes the response's process set spans; a node with none of its
  // ranks has nothing parked for it and skips it (in step: the sequence
  // number still advances).
  if (node_of_.empty()) {
    // Fixed by the welcome, which comes before any plan: copied once.
    absl::MutexLock l(&mu_);
    node_of_ = rank_node_;
    all_ranks_.resize(options_.size);
    for (int r = 0; r < options_.size; ++r) all_ranks_[r] = r;
  }
  const std::vector<int>& node_of = node_of_;
  active_nodes_.clear();
  active_members_ = &all_ranks_;
  set_size_ = options_.size;
  if (entry.process_set != 0) {
    auto it = sets_.find(entry.process_set);
    if (it != sets_.end()) {
      active_members_ = &it->second;
      for (int r : it->second) {
        if (r >= 0 && r < static_cast<int>(node_of.size())) active_nodes_.push_back(node_of[r]);
      }
      std::sort(active_nodes_.begin(), active_nodes_.end());
      active_nodes_.erase(std::unique(active_nodes_.begin(), active_nodes_.end()),
                          active_nodes_.end());
      set_size_ = static_cast<int>(it->second.size());
      if (!std::binary_search(active_nodes_.begin(), active_nodes_.end(), transport_->node())) {
        ++sequence_;
        return;
      }
    }
  }
  if (std::find(entry.joined_nodes.begin(), entry.joined_nodes.end(), transport_->node()) !=
      entry.joined_nodes.end()) {
    const uint64_t joined_seq = sequence_++;
    absl::Status s = RunAsJoined(entry, (joined_seq & 0xffffff) << 24);
    bool was_aborted;
    {
      absl::MutexLock l(&mu_);
      was_aborted = !aborted_.ok();
    }
    if (!s.ok() && !was_aborted) {
      // The other nodes counted on this one's zeros: end the job.
      options_.abort_job(absl::Status(s.code(), absl::StrCat("job ", options_.job_id, " on node ",
                                                             options_.node_name, ": ",
                                                             s.message())));
    }
    return;
  }
  std::vector<ReadySet> sets;
  absl::Status aborted;
  {
    absl::MutexLock l(&mu_);
    aborted = aborted_;
    for (const std::string& name : entry.names) {
      auto it = parked_.find(name);
      if (it == parked_.end()) {
        if (entry.error.ok()) {
          entry.error = absl::InternalError(absl::StrCat(
              "the plan names \"", name, "\", which is not ready on node ", options_.node_name));
        }
        continue;
      }
      sets.push_back(std::move(it->second));
      parked_.erase(it);
    }
  }
  const uint64_t seq = sequence_++;
  if (!aborted.ok() && (!entry.error.ok() || sets.size() != entry.names.size())) {
    Complete(sets, aborted);
    return;
  }
  // After an abort a planned response still runs while the transport lives
  // (see AbortTransportLoop); once it is aborted, the run fails with why.
  if (entry.error.code() == absl::StatusCode::kInternal && entry.names.size() != sets.size()) {
    // The other nodes are about to move this response's data and would
    // wait for this one: end the job everywhere now.
    Complete(sets, entry.error);
    options_.abort_job(absl::InternalError(
        absl::StrCat("job ", options_.job_id, " on node ", options_.node_name, ": ",
                     entry.error.message())));
    return;
  }
  if (!entry.error.ok() || sets.empty()) {
    Complete(sets, entry.error);
    // A disagreement between the nodes is a failed collective here too.
    if (!sets.empty() && options_.on_executed) {
      options_.on_executed(sets, entry.error, absl::Now(), absl::Now());
    }
    return;
  }
  const CollectiveKind kind = sets.front().requests.front().kind;
  if (!aborted.ok() && (kind == CollectiveKind::kJoin || kind == CollectiveKind::kAddProcessSet ||
                        kind == CollectiveKind::kRemoveProcessSet)) {
    // The job is over: nothing more to agree on.
    Complete(sets, aborted);
    return;
  }
  if (kind == CollectiveKind::kJoin) {
    if (options_.join_done) {
      options_.join_done(std::move(sets), entry.last_joined);
    } else {
      Complete(sets, absl::UnimplementedError("join does not span nodes"));
    }
    return;
  }
  if (kind == CollectiveKind::kAddProcessSet || kind == CollectiveKind::kRemoveProcessSet) {
    const std::vector<int64_t>& aux = sets.front().requests.front().aux;
    if (kind == CollectiveKind::kAddProcessSet) {
      sets_[entry.new_process_set] = std::vector<int>(aux.begin(), aux.end());
      std::sort(sets_[entry.new_process_set].begin(), sets_[entry.new_process_set].end());
    } else if (!aux.empty()) {
      sets_.erase(static_cast<int>(aux[0]));
    }
    if (options_.change_set) {
      options_.change_set(std::move(sets), entry.new_process_set);
    } else {
      Complete(sets, absl::UnimplementedError("process sets do not span nodes"));
    }
    return;
  }
  if (sets.front().requests.front().device.has_value()) {
    if (!options_.run_device) {
      Complete(sets, absl::UnimplementedError("device tensors: no device backend"));
      return;
    }
    options_.run_device(std::move(sets), entry.device_comm ? &*entry.device_comm : nullptr);
    return;
  }
  // Each job has its own transport, so the response's sequence number alone
  // keeps its transfers apart (bits 24-47; the algorithms use the low 24).
  const uint64_t tag_base = (seq & 0xffffff) << 24;
  // A process set's collective runs among the nodes of its ranks.
  subset_.reset();
  active_ = transport_.get();
  active_node_of_ = &node_of_;
  if (entry.process_set != 0 && !active_nodes_.empty()) {
    subset_ = std::make_unique<SubsetTransport>(*transport_, active_nodes_);
    active_ = subset_.get();
    // Ranks' nodes, numbered within the set's nodes.
    subset_node_of_ = node_of_;
    for (int& n : subset_node_of_) {
      auto at = std::find(active_nodes_.begin(), active_nodes_.end(), n);
      n = at == active_nodes_.end() ? -1 : static_cast<int>(at - active_nodes_.begin());
    }
    active_node_of_ = &subset_node_of_;
  }
  const absl::Time start = absl::Now();
  absl::Status status;
  switch (sets.front().requests.front().kind) {
    case CollectiveKind::kAllreduce:
      status = RunAllreduce(sets, tag_base);
      break;
    case CollectiveKind::kBroadcast:
      status = RunBroadcast(sets, tag_base);
      break;
    case CollectiveKind::kAllgather:
    case CollectiveKind::kReducescatter:
    case CollectiveKind::kAlltoall: {
      // Each request gets a new tensor in its session's result area.
      std::vector<Completion> done;
      const CollectiveKind kind = sets.front().requests.front().kind;
      status = kind == CollectiveKind::kAllgather
                   ? RunAllgather(sets, entry.rows, tag_base, &done)
                   : kind == CollectiveKind::kAlltoall
                         ? RunAlltoall(sets, entry.splits, tag_base, &done)
                         : RunReducescatter(sets, tag_base, &done);
      if (status.ok()) {
        std::map<Session*, std::vector<Completion>> by_session;
        size_t i = 0;
        for (const ReadySet& set : sets) {
          for (const Request& r : set.requests) by_session[r.session.get()].push_back(done[i++]);
        }
        for (auto& [s, cs] : by_session) s->Complete(cs);
        if (options_.on_executed) options_.on_executed(sets, status, start, absl::Now());
        return;
      }
      break;
    }
    case CollectiveKind::kBarrier:
      break;  // every node reached it: that is all a barrier is
    default:
      status = absl::UnimplementedError(
          "process sets and join do not span nodes");
  }
  if (!status.ok()) {
    absl::MutexLock l(&mu_);
    if (!aborted_.ok()) status = aborted_;
  }
  Complete(sets, status);
  if (options_.on_executed) options_.on_executed(sets, status, start, absl::Now());
}

absl::StatusOr<uint64_t> NodeGroup::ReduceLocalRanks(const std::vector<ReadySet>& sets,
                                                     std::vector<uint64_t>* offsets) {
  const Request& first = sets.front().requests.front();
  const DType dtype = first.dtype;
  const size_t esize = DTypeSize(dtype);
  const ReduceOp op = first.op == ReduceOp::kAverage ? ReduceOp::kSum : first.op;
  const uint64_t total = LayOut(sets, offsets);
  if (fusion_buffer_.size() < total) fusion_buffer_.resize(total);
  // Only the alignment padding between members needs defined (zero) values;
  // the members themselves are overwritten by the local reduction.
  for (size_t i = 0; i < sets.size(); ++i) {
    const uint64_t end = (*offsets)[i] + sets[i].requests.front().bytes;
    const uint64_t next = i + 1 < sets.size() ? (*offsets)[i + 1] : total;
    std::memset(fusion_buffer_.data() + end, 0, next - end);
  }
  std::vector<uint8_t> zeros;
  for (size_t i = 0; i < sets.size(); ++i) {
    const uint64_t n = sets[i].requests.front().bytes / esize;
    if (n == 0) continue;
    std::vector<const void*> srcs;
    for (const Request& r : sets[i].requests) srcs.push_back(r.input);
    if (sets[i].joined > 0 && op != ReduceOp::kSum) {
      // Joined ranks contribute zeros (min, max and product see them).
      zeros.assign(n * esize, 0);
      srcs.push_back(zeros.data());
    }
    void* dst = fusion_buffer_.data() + (*offsets)[i];
    absl::Status s = kernels::Reduce(dtype, op, absl::MakeSpan(srcs), absl::MakeSpan(&dst, 1), n,
                                     first.prescale, 1.0);
    if (!s.ok()) return s;
  }
  return total;
}

absl::Status NodeGroup::AllreduceFusionBuffer(const Request& first, uint64_t total,
                                              uint64_t tag_base) {
  const DType dtype = first.dtype;
  const size_t esize = DTypeSize(dtype);
  const ReduceOp op = first.op == ReduceOp::kAverage ? ReduceOp::kSum : first.op;
  const uint64_t count = total / esize;
  if (first.compression == Compression::kNone || dtype != DType::kFloat32) {
    return Allreduce(*active_, fusion_buffer_.data(), count, dtype, op, tag_base,
                     absl::Now() + kTransferDeadline);
  }
  // Between nodes the partial sums travel as 16-bit floats (half the
  // bytes); each hop adds in float32 and rounds the sum to 16 bits.
  const DType wire =
      first.compression == Compression::kFloat16 ? DType::kFloat16 : DType::kBFloat16;
  auto* f32 = reinterpret_cast<float*>(fusion_buffer_.data());
  if (wire_buffer_.size() < count) wire_buffer_.resize(count);
  if (wire == DType::kFloat16) {
    kernels::FloatToHalfArray(f32, wire_buffer_.data(), count);
  } else {
    kernels::FloatToBFloat16Array(f32, wire_buffer_.data(), count);
  }
  absl::Status s = Allreduce(*active_, wire_buffer_.data(), count, wire, op, tag_base,
                             absl::Now() + kTransferDeadline);
  if (!s.ok()) return s;
  if (wire == DType::kFloat16) {
    kernels::HalfToFloatArray(wire_buffer_.data(), f32, count);
  } else {
    kernels::BFloat16ToFloatArray(wire_buffer_.data(), f32, count);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> NodeGroup::ReduceAmongNodes(const std::vector<ReadySet>& sets,
                                                     uint64_t tag_base,
                                                     std::vector<uint64_t>* offsets,
                                                     double* postscale) {
  const Request& first = sets.front().requests.front();
  *postscale = first.postscale;
  if (first.op == ReduceOp::kAverage) *postscale /= set_size_;
  absl::StatusOr<uint64_t> total = ReduceLocalRanks(sets, offsets);
  if (!total.ok()) return total.status();
  if (absl::Status s = AllreduceFusionBuffer(first, *total, tag_base); !s.ok()) return s;
  return total;
}

absl::Status NodeGroup::RunAsJoined(const PlannedEntry& entry, uint64_t tag_base) {
  if (entry.metas.empty()) return absl::InternalError("a planned response without metadata");
  const kolo::v1::TensorMeta& head = entry.metas.front();
  const auto kind = static_cast<CollectiveKind>(head.kind());
  // The same layout as the nodes that hold the tensors (LayOut).
  uint64_t total = 0;
  for (const kolo::v1::TensorMeta& m : entry.metas) total = Align(total) + m.bytes();
  if (total > (uint64_t{1} << 40)) return absl::InternalError("a planned response too large");
  subset_.reset();
  active_ = transport_.get();
  if (fusion_buffer_.size() < total) fusion_buffer_.resize(total);
  std::memset(fusion_buffer_.data(), 0, total);
  switch (kind) {
    case CollectiveKind::kAllreduce: {
      Request as;
      as.dtype = static_cast<DType>(head.dtype());
      as.op = static_cast<ReduceOp>(head.op());
      as.compression = static_cast<Compression>(head.compression());
      if (DTypeSize(as.dtype) == 0) return absl::InternalError("unknown dtype in a plan");
      return AllreduceFusionBuffer(as, total, tag_base);
    }
    case CollectiveKind::kBroadcast: {
      const int root = head.root_rank();
      const int root_node =
          root >= 0 && root < static_cast<int>(node_of_.size()) ? node_of_[root] : -1;
      if (root_node < 0) return absl::InternalError("broadcast root on no known node");
      return TreeBroadcast(*active_, fusion_buffer_.data(), total, root_node, tag_base,
                           absl::Now() + kTransferDeadline);
    }
    case CollectiveKind::kBarrier:
      return absl::OkStatus();
    default:
      return absl::InternalError(absl::StrCat(CollectiveKindName(kind),
                                              " planned while a node's ranks all joined"));
  }
}

absl::Status NodeGroup::RunAllreduce(std::vector<ReadySet>& sets, uint64_t tag_base) {
  const DType dtype = sets.front().requests.front().dtype;
  const size_t esize = DTypeSize(dtype);
  if (sets.size() == 1 && sets.front().requests.size() == 1 && sets.front().joined == 0 &&
      sets.front().requests.front().compression == Compression::kNone) {
    // One tensor of one local rank: reduce among the nodes straight in the
    // rank's output, without the two passes through the fusion buffer.
    const Request& r = sets.front().requests.front();
    const uint64_t n = r.bytes / esize;
    if (n == 0) return absl::OkStatus();
    double postscale = r.postscale;
    if (r.op == ReduceOp::kAverage) postscale /= set_size_;
    const ReduceOp op = r.op == ReduceOp::kAverage ? ReduceOp::kSum : r.op;
    void* out = r.output;
    if (r.input != r.output || r.prescale != 1.0) {
      if (absl::Status s = kernels::ScaleCopy(dtype, r.input, absl::MakeSpan(&out, 1), n,
                                              r.prescale);
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = Allreduce(*active_, r.output, n, dtype, op, tag_base,
                                   absl::Now() + kTransferDeadline);
        !s.ok()) {
      return s;
    }
    if (postscale == 1.0) return absl::OkStatus();
    return kernels::ScaleCopy(dtype, r.output, absl::MakeSpan(&out, 1), n, postscale);
  }
  std::vector<uint64_t> offsets;
  double postscale = 1.0;
  absl::StatusOr<uint64_t> total = ReduceAmongNodes(sets, tag_base, &offsets, &postscale);
  if (!total.ok()) return total.status();
  absl::Status s;
  for (size_t i = 0; i < sets.size(); ++i) {
    const uint64_t n = sets[i].requests.front().bytes / esize;
    if (n == 0) continue;
    std::vector<void*> dsts;
    for (const Request& r : sets[i].requests) dsts.push_back(r.output);
    s = kernels::ScaleCopy(dtype, fusion_buffer_.data() + offsets[i], absl::MakeSpan(dsts), n,
                           postscale);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status NodeGroup::RunAllgather(std::vector<ReadySet>& sets,
                                     const std::vector<int64_t>& rows, uint64_t tag_base,
                                     std::vector<Completion>* done) {
  if (sets.size() != 1) return absl::InternalError("an allgather response has one tensor");
  ReadySet& set = sets.front();
  const Request& first = set.requests.front();
  const std::string what = absl::StrCat("allgather \"", set.name, "\"");
  const uint64_t row_bytes = RowBytes(first);
  if (static_cast<int>(rows.size()) != options_.size) {
    return absl::InternalError(absl::StrCat(what, ": the plan gives ", rows.size(),
                                            " row counts for ", options_.size, " ranks"));
  }
  // Over the process set's ranks (every rank for set 0), by position.
  const std::vector<int>& members = *active_members_;
  const int size = static_cast<int>(members.size());
  std::vector<int> node_of(size);
  std::vector<int> position(options_.size, -1);
  for (int m = 0; m < size; ++m) {
    node_of[m] = (*active_node_of_)[members[m]];
    position[members[m]] = m;
  }
  auto rows_of = [&](int m) { return static_cast<uint64_t>(rows[members[m]]); };
  // Rank order (the output) and node order (the exchange: each node's ranks
  // as one block). They coincide when every node hosts consecutive ranks.
  std::vector<uint64_t> out_at(size), packed_at(size);
  uint64_t total = 0;
  for (int m = 0; m < size; ++m) {
    const int64_t r = rows[members[m]];
    if (r < 0 || node_of[m] < 0 ||
        (row_bytes > 0 && static_cast<uint64_t>(r) > (uint64_t{1} << 40) / row_bytes)) {
      return absl::InternalError(
          absl::StrCat(what, ": unusable rows ", r, " of rank ", members[m]));
    }
    out_at[m] = total;
    total += rows_of(m) * row_bytes;
  }
  const int nodes = active_->nodes();
  std::vector<uint64_t> block_at(nodes, 0), block_bytes(nodes, 0);
  uint64_t packed = 0;
  for (int n = 0; n < nodes; ++n) {
    block_at[n] = packed;
    for (int m = 0; m < size; ++m) {
      if (node_of[m] != n) continue;
      packed_at[m] = packed;
      packed += rows_of(m) * row_bytes;
    }
    block_bytes[n] = packed - block_at[n];
  }
  if (fusion_buffer_.size() < total) fusion_buffer_.resize(total);
  for (const Request& r : set.requests) {
    const int m = position[r.rank];
    const uint64_t bytes = m < 0 ? UINT64_MAX : rows_of(m) * row_bytes;
    if (r.bytes != bytes) {
      return absl::InternalError(absl::StrCat(what, ": rank ", r.rank, " has ", r.bytes,
                                              " bytes, the plan does not agree"));
    }
    if (bytes > 0) std::memcpy(fusion_buffer_.data() + packed_at[m], r.input, bytes);
  }
  absl::Status s = RingAllgatherV(*active_, fusion_buffer_.data(), block_at, block_bytes,
                                  tag_base, absl::Now() + kTransferDeadline);
  if (!s.ok()) return s;
  bool in_rank_order = true;
  for (int m = 0; m < size; ++m) in_rank_order = in_rank_order && packed_at[m] == out_at[m];
  int64_t total_rows = 0;
  for (int m = 0; m < size; ++m) total_rows += rows[members[m]];
  // Each local rank gets the result in its session's result area.
  for (size_t i = 0; i < set.requests.size(); ++i) {
    const Request& r = set.requests[i];
    absl::StatusOr<uint64_t> offset = r.session->AllocateResult(total);
    if (!offset.ok()) {
      for (size_t j = 0; j < i; ++j) {
        set.requests[j].session->ReleaseResult((*done)[j].result_offset);
      }
      done->clear();
      return absl::ResourceExhaustedError(absl::StrCat(what, ": ", offset.status().message()));
    }
    uint8_t* dst = r.session->arena_base() + *offset;
    if (in_rank_order) {
      if (total > 0) std::memcpy(dst, fusion_buffer_.data(), total);
    } else {
      for (int q = 0; q < size; ++q) {
        const uint64_t bytes = rows_of(q) * row_bytes;
        if (bytes > 0) std::memcpy(dst + out_at[q], fusion_buffer_.data() + packed_at[q], bytes);
      }
    }
    Completion c{r.request_id, absl::OkStatus()};
    c.result_offset = *offset;
    c.result_bytes = total;
    c.value = total_rows;
    done->push_back(c);
  }
  return absl::OkStatus();
}

absl::Status NodeGroup::RunAlltoall(std::vector<ReadySet>& sets,
                                    const std::vector<int64_t>& splits, uint64_t tag_base,
                                    std::vector<Completion>* done) {
  if (sets.size() != 1) return absl::InternalError("an alltoall response has one tensor");
  ReadySet& set = sets.front();
  const Request& first = set.requests.front();
  const std::string what = absl::StrCat("alltoall \"", set.name, "\"");
  // Over the process set's ranks (every rank for set 0), by position.
  const std::vector<int>& members = *active_members_;
  const int size = static_cast<int>(members.size());
  if (splits.size() != static_cast<size_t>(size) * size) {
    return absl::InternalError(absl::StrCat(what, ": the plan gives ", splits.size(),
                                            " splits for ", size, " ranks"));
  }
  for (int64_t v : splits) {
    if (v < 0 || v > (int64_t{1} << 40)) {
      return absl::InternalError(absl::StrCat(what, ": unusable split ", v));
    }
  }
  const uint64_t row_bytes = RowBytes(first);
  auto rows = [&](int i, int j) { return static_cast<uint64_t>(splits[i * size + j]); };
  std::vector<int> node_of(size);
  std::vector<int> position(options_.size, -1);
  for (int m = 0; m < size; ++m) {
    node_of[m] = (*active_node_of_)[members[m]];
    position[members[m]] = m;
  }
  const int me = active_->node();
  const int nodes = active_->nodes();
  std::vector<const Request*> local(size, nullptr);  // by position, this node's
  for (const Request& r : set.requests) {
    if (position[r.rank] < 0) return absl::InternalError(absl::StrCat(what, ": rank ", r.rank,
                                                                     " is not in its set"));
    local[position[r.rank]] = &r;
  }
  // Where rank i's rows for rank j start in i's input.
  auto src_offset = [&](int i, int j) {
    uint64_t rows_before = 0;
    for (int k = 0; k < j; ++k) rows_before += rows(i, k);
    return rows_before * row_bytes;
  };
  // One message per peer node each way: for each source rank of the sender
  // (ascending), its rows for each destination rank of the receiver
  // (ascending).
  std::vector<std::vector<uint8_t>> out(nodes), in(nodes);
  std::vector<uint64_t> in_at(static_cast<size_t>(size) * size, 0);  // of (i, j) in in[node(i)]
  for (int b = 0; b < nodes; ++b) {
    if (b == me) continue;
    for (int i = 0; i < size; ++i) {
      for (int j = 0; j < size; ++j) {
        const uint64_t bytes = rows(i, j) * row_bytes;
        if (node_of[i] == me && node_of[j] == b && bytes > 0) {
          const uint8_t* src = local[i]->input + src_offset(i, j);
          out[b].insert(out[b].end(), src, src + bytes);
        }
        if (node_of[i] == b && node_of[j] == me) {
          in_at[static_cast<size_t>(i) * size + j] = in[b].size();
          in[b].resize(in[b].size() + bytes);
        }
      }
    }
  }
  {
    PendingTransfers pending(*active_, absl::Now() + kTransferDeadline);
    std::vector<Transport::Ticket> tickets;
    const uint64_t tag = MessageTag(tag_base, CollectivePhase::kAlltoall, 0);
    for (int b = 0; b < nodes; ++b) {
      if (b == me) continue;
      absl::StatusOr<Transport::Ticket> r = pending.Recv(b, tag, in[b].data(), in[b].size());
      if (!r.ok()) return r.status();
      tickets.push_back(*r);
      absl::StatusOr<Transport::Ticket> s = pending.Send(b, tag, out[b].data(), out[b].size());
      if (!s.ok()) return s.status();
      tickets.push_back(*s);
    }
    if (absl::Status s = pending.Wait(tickets); !s.ok()) return s;
  }
  // Each local destination j: a header of the rows received from each rank,
  // then those rows in rank order (the result layout of one node).
  const uint64_t header = (static_cast<uint64_t>(size) * sizeof(int64_t) + 63) & ~uint64_t{63};
  std::vector<std::pair<Session*, uint64_t>> allocated;
  for (int j = 0; j < size; ++j) {
    if (local[j] == nullptr) continue;
    const Request& r = *local[j];
    int64_t received = 0;
    for (int i = 0; i < size; ++i) received += splits[i * size + j];
    const uint64_t bytes = header + static_cast<uint64_t>(received) * row_bytes;
    absl::StatusOr<uint64_t> offset = r.session->AllocateResult(bytes);
    if (!offset.ok()) {
      for (auto& [session, at] : allocated) session->ReleaseResult(at);
      done->clear();
      return absl::ResourceExhaustedError(absl::StrCat(what, ": ", offset.status().message()));
    }
    allocated.push_back({r.session.get(), *offset});
    uint8_t* dst = r.session->arena_base() + *offset;
    auto* counts = reinterpret_cast<int64_t*>(dst);
    uint64_t at = header;
    for (int i = 0; i < size; ++i) {
      counts[i] = splits[i * size + j];
      const uint64_t len = rows(i, j) * row_bytes;
      if (len == 0) continue;
      if (node_of[i] == me) {
        std::memcpy(dst + at, local[i]->input + src_offset(i, j), len);
      } else {
        std::memcpy(dst + at, in[node_of[i]].data() + in_at[static_cast<size_t>(i) * size + j],
                    len);
      }
      at += len;
    }
    Completion c{r.request_id, absl::OkStatus()};
    c.result_offset = *offset;
    c.result_bytes = bytes;
    c.value = received;
    done->push_back(c);
  }
  // Completions in the order of set.requests.
  std::vector<Completion> ordered;
  for (const Request& r : set.requests) {
    for (const Completion& c : *done) {
      if (c.request_id == r.request_id) ordered.push_back(c);
    }
  }
  *done = std::move(ordered);
  return absl::OkStatus();
}

absl::Status NodeGroup::RunReducescatter(std::vector<ReadySet>& sets, uint64_t tag_base,
                                         std::vector<Completion>* done) {
  const DType dtype = sets.front().requests.front().dtype;
  const size_t esize = DTypeSize(dtype);
  // The whole tensors are reduced among the nodes (as an allreduce), then
  // each local rank takes its rows: rank r gets total/size rows, one more
  // when r < total % size, in rank order (as on one node).
  std::vector<uint64_t> offsets;
  double postscale = 1.0;
  absl::StatusOr<uint64_t> total = ReduceAmongNodes(sets, tag_base, &offsets, &postscale);
  if (!total.ok()) return total.status();
  auto release = [&] {
    size_t k = 0;
    for (const ReadySet& set : sets) {
      for (const Request& r : set.requests) {
        if (k < done->size()) r.session->ReleaseResult((*done)[k].result_offset);
        ++k;
      }
    }
    done->clear();
  };
  // Slices by position in the process set (every rank for set 0).
  const std::vector<int>& members = *active_members_;
  const int64_t size = static_cast<int64_t>(members.size());
  std::vector<int64_t> position(options_.size, -1);
  for (int64_t m = 0; m < size; ++m) position[members[m]] = m;
  for (size_t i = 0; i < sets.size(); ++i) {
    const Request& q = sets[i].requests.front();
    const int64_t total_rows = q.shape.empty() ? 0 : q.shape[0];
    const uint64_t row_bytes = total_rows > 0 ? q.bytes / static_cast<uint64_t>(total_rows) : 0;
    for (const Request& r : sets[i].requests) {
      const int64_t at = position[r.rank];
      const int64_t rows = total_rows / size + (at < total_rows % size ? 1 : 0);
      const int64_t first_row = at * (total_rows / size) + std::min<int64_t>(at, total_rows % size);
      const uint64_t bytes = static_cast<uint64_t>(rows) * row_bytes;
      absl::StatusOr<uint64_t> offset = r.session->AllocateResult(bytes);
      if (!offset.ok()) {
        release();
        return absl::ResourceExhaustedError(absl::StrCat(
            "reducescatter \"", sets[i].name, "\": ", offset.status().message()));
      }
      Completion c{r.request_id, absl::OkStatus()};
      c.result_offset = *offset;
      c.result_bytes = bytes;
      c.value = rows;
      done->push_back(c);
      if (bytes == 0) continue;
      void* dst = r.session->arena_base() + *offset;
      if (absl::Status s = kernels::ScaleCopy(
              dtype, fusion_buffer_.data() + offsets[i] + static_cast<uint64_t>(first_row) * row_bytes,
              absl::MakeSpan(&dst, 1), bytes / esize, postscale);
          !s.ok()) {
        release();
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status NodeGroup::RunBroadcast(std::vector<ReadySet>& sets, uint64_t tag_base) {
  const Request& first = sets.front().requests.front();
  const int root = first.root_rank;
  // The root's node, numbered within the nodes of the response's set.
  const int root_node = root >= 0 && root < static_cast<int>(active_node_of_->size())
                            ? (*active_node_of_)[root]
                            : -1;
  if (root_node < 0) return absl::InternalError("broadcast root on no known node");
  std::vector<uint64_t> offsets;
  const uint64_t total = LayOut(sets, &offsets);
  if (fusion_buffer_.size() < total) fusion_buffer_.resize(total);
  for (size_t i = 0; i < sets.size(); ++i) {
    for (const Request& r : sets[i].requests) {
      if (r.rank == root) std::memcpy(fusion_buffer_.data() + offsets[i], r.input, r.bytes);
    }
  }
  absl::Status s = TreeBroadcast(*active_, fusion_buffer_.data(), total, root_node,
                                             tag_base, absl::Now() + kTransferDeadline);
  if (!s.ok()) return s;
  for (size_t i = 0; i < sets.size(); ++i) {
    for (const Request& r : sets[i].requests) {
      if (r.bytes > 0 && r.output != fusion_buffer_.data() + offsets[i]) {
        std::memcpy(r.output, fusion_buffer_.data() + offsets[i], r.bytes);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon
