#include "daemon/backend/host_multinode/host_multinode_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "daemon/algorithms/adasum.h"
#include "daemon/algorithms/allgather.h"
#include "daemon/algorithms/allreduce.h"
#include "daemon/algorithms/alltoall.h"
#include "daemon/algorithms/broadcast.h"
#include "daemon/plan/fusion.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/reduce.h"
#include "proto/kolo/abi/collective_traits.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo::daemon {
namespace {

// Transfers fail by abort (peer loss is detected by heartbeats), so their
// own deadline is only a backstop.
constexpr absl::Duration kTransferDeadline = absl::Minutes(30);
// The largest buffer a plan may make a node allocate.
constexpr uint64_t kMaxPlannedBytes = uint64_t{1} << 40;

ReduceOp WireOp(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

}  // namespace

HostMultinodeBackend::HostMultinodeBackend(Transport* transport, std::vector<int> node_of)
    : transport_(transport), node_of_(std::move(node_of)) {
  all_ranks_.resize(node_of_.size());
  for (size_t r = 0; r < all_ranks_.size(); ++r) all_ranks_[r] = static_cast<int>(r);
}

void HostMultinodeBackend::SelectNodes(const StepContext& step) {
  subset_.reset();
  active_ = transport_;
  active_node_of_ = &node_of_;
  members_ = step.set_ranks != nullptr ? step.set_ranks.get() : &all_ranks_;
  if (step.set_ranks == nullptr) return;
  std::vector<int> nodes;
  for (int r : *step.set_ranks) {
    if (r >= 0 && r < static_cast<int>(node_of_.size())) nodes.push_back(node_of_[r]);
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  if (static_cast<int>(nodes.size()) == transport_->nodes()) return;
  // Ranks' nodes, numbered within the set's nodes.
  subset_node_of_ = node_of_;
  for (int& n : subset_node_of_) {
    auto at = std::find(nodes.begin(), nodes.end(), n);
    n = at == nodes.end() ? -1 : static_cast<int>(at - nodes.begin());
  }
  active_node_of_ = &subset_node_of_;
  subset_ = std::make_unique<SubsetTransport>(*transport_, std::move(nodes));
  active_ = subset_.get();
}

absl::Status HostMultinodeBackend::Execute(Response& response, const StepContext& step) {
  // Each job has its own transport, so the response's sequence number alone
  // keeps its transfers apart (bits 24-47; the algorithms use the low 24).
  const uint64_t tag_base = (step.sequence & 0xffffff) << 24;
  SelectNodes(step);
  results_ = step.results;
  if (step.joined_here) return RunAsJoined(response, step, tag_base);
  if (response.members.empty()) return absl::OkStatus();
  if (ReturnsResult(response.kind) && results_ == nullptr) {
    return absl::InternalError(
        absl::StrCat(CollectiveKindName(response.kind), ": no result area to write to"));
  }
  switch (response.kind) {
    case CollectiveKind::kAllreduce:
      return RunAllreduce(response, tag_base);
    case CollectiveKind::kBroadcast:
      return RunBroadcast(response, tag_base);
    case CollectiveKind::kAllgather:
      return RunAllgather(response, step.rows, tag_base);
    case CollectiveKind::kAlltoall:
      return RunAlltoall(response, step.splits, tag_base);
    case CollectiveKind::kReducescatter:
      return RunReducescatter(response, tag_base);
    case CollectiveKind::kBarrier:
      return absl::OkStatus();  // every node reached it: that is all a barrier is
    default:
      return absl::InternalError(
          absl::StrCat(CollectiveKindName(response.kind), " is not a collective the backend runs"));
  }
}

absl::Status HostMultinodeBackend::ReduceLocalRanks(const Response& response) {
  const DType dtype = response.dtype;
  const size_t esize = DTypeSize(dtype);
  const ReduceOp op = WireOp(response.op);
  const uint64_t total = response.total_bytes;
  if (fusion_buffer_.size() < total) fusion_buffer_.resize(total);
  // Only the alignment padding between members needs defined (zero) values;
  // the members themselves are overwritten by the local reduction.
  const auto& members = response.members;
  for (size_t i = 0; i < members.size(); ++i) {
    const uint64_t end = members[i].offset + members[i].set.requests.front().bytes;
    const uint64_t next = i + 1 < members.size() ? members[i + 1].offset : total;
    // (A zero-byte response leaves the buffer empty, its data() null.)
    if (next > end) std::memset(fusion_buffer_.data() + end, 0, next - end);
  }
  std::vector<uint8_t> zeros;
  for (const FusedMember& m : members) {
    const uint64_t n = m.set.requests.front().bytes / esize;
    if (n == 0) continue;
    std::vector<const void*> srcs;
    for (const Request& r : m.set.requests) srcs.push_back(r.input);
    if (m.set.joined > 0 && op != ReduceOp::kSum) {
      // Joined ranks contribute zeros (min, max and product see them).
      zeros.assign(n * esize, 0);
      srcs.push_back(zeros.data());
    }
    void* dst = fusion_buffer_.data() + m.offset;
    if (absl::Status s = kernels::Reduce(dtype, op, absl::MakeSpan(srcs), absl::MakeSpan(&dst, 1),
                                         n, response.prescale, 1.0);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status HostMultinodeBackend::AllreduceFusionBuffer(const Response& response, uint64_t total,
                                                         uint64_t tag_base) {
  const DType dtype = response.dtype;
  const ReduceOp op = WireOp(response.op);
  const uint64_t count = total / DTypeSize(dtype);
  if (response.compression == Compression::kNone || dtype != DType::kFloat32) {
    return Allreduce(*active_, fusion_buffer_.data(), count, dtype, op, tag_base,
                     absl::Now() + kTransferDeadline);
  }
  // Between nodes the partial sums travel as 16-bit floats (half the
  // bytes); each hop adds in float32 and rounds the sum to 16 bits.
  const DType wire =
      response.compression == Compression::kFloat16 ? DType::kFloat16 : DType::kBFloat16;
  auto* f32 = reinterpret_cast<float*>(fusion_buffer_.data());
  if (wire_buffer_.size() < count) wire_buffer_.resize(count);
  if (wire == DType::kFloat16) {
    kernels::FloatToHalfArray(f32, wire_buffer_.data(), count);
  } else {
    kernels::FloatToBFloat16Array(f32, wire_buffer_.data(), count);
  }
  if (absl::Status s = Allreduce(*active_, wire_buffer_.data(), count, wire, op, tag_base,
                                 absl::Now() + kTransferDeadline);
      !s.ok()) {
    return s;
  }
  if (wire == DType::kFloat16) {
    kernels::HalfToFloatArray(wire_buffer_.data(), f32, count);
  } else {
    kernels::BFloat16ToFloatArray(wire_buffer_.data(), f32, count);
  }
  return absl::OkStatus();
}

absl::Status HostMultinodeBackend::ReduceAmongNodes(const Response& response, uint64_t tag_base,
                                                    double* postscale) {
  *postscale = response.postscale;
  if (response.op == ReduceOp::kAverage) *postscale /= static_cast<double>(members_->size());
  if (absl::Status s = ReduceLocalRanks(response); !s.ok()) return s;
  return AllreduceFusionBuffer(response, response.total_bytes, tag_base);
}

absl::Status HostMultinodeBackend::RunAsJoined(const Response& response, const StepContext& step,
                                               uint64_t tag_base) {
  // The same layout as the nodes that hold the tensors.
  uint64_t sum = 0;
  for (uint64_t bytes : step.joined_member_bytes) {
    sum += bytes;
    if (bytes > kMaxPlannedBytes || sum > kMaxPlannedBytes) {
      return absl::InternalError("a planned response too large");
    }
  }
  const uint64_t total = plan::LayOut(step.joined_member_bytes).total_bytes;
  if (fusion_buffer_.size() < total) fusion_buffer_.resize(total);
  std::memset(fusion_buffer_.data(), 0, total);
  switch (response.kind) {
    case CollectiveKind::kAllreduce:
      if (DTypeSize(response.dtype) == 0) return absl::InternalError("unknown dtype in a plan");
      if (response.op == ReduceOp::kAdasum) {
        // Zeros, which leave the other nodes' tensors as they are.
        return AdasumAmongNodes(response.dtype, plan::LayOut(step.joined_member_bytes).offsets,
                                total, tag_base);
      }
      return AllreduceFusionBuffer(response, total, tag_base);
    case CollectiveKind::kBarrier:
      return absl::OkStatus();
    default:
      return absl::InternalError(absl::StrCat(CollectiveKindName(response.kind),
                                              " planned while a node's ranks all joined"));
  }
}

absl::Status HostMultinodeBackend::AdasumAmongNodes(DType dtype,
                                                    absl::Span<const uint64_t> offsets,
                                                    uint64_t total, uint64_t tag_base) {
  // Each member a tensor of its own (its alignment padding, zeros, with it).
  const size_t esize = DTypeSize(dtype);
  std::vector<size_t> ends;
  for (size_t i = 0; i < offsets.size(); ++i) {
    ends.push_back((i + 1 < offsets.size() ? offsets[i + 1] : total) / esize);
  }
  if (ends.empty()) ends.push_back(total / esize);
  return AdasumAllreduce(*active_, fusion_buffer_.data(), total / esize, dtype, ends, tag_base,
                         absl::Now() + kTransferDeadline);
}

absl::Status HostMultinodeBackend::RunAdasum(Response& response, uint64_t tag_base) {
  const DType dtype = response.dtype;
  const size_t esize = DTypeSize(dtype);
  const uint64_t total = response.total_bytes;
  if (fusion_buffer_.size() < total) fusion_buffer_.resize(total);
  std::memset(fusion_buffer_.data(), 0, total);
  std::vector<uint64_t> offsets;
  // Each tensor's tree over this node's ranks (rank order), then the tree
  // over the nodes.
  for (const FusedMember& m : response.members) {
    offsets.push_back(m.offset);
    std::vector<const Request*> ranks;
    for (const Request& r : m.set.requests) ranks.push_back(&r);
    std::sort(ranks.begin(), ranks.end(),
              [](const Request* a, const Request* b) { return a->rank < b->rank; });
    std::vector<const void*> inputs;
    for (const Request* r : ranks) inputs.push_back(r->input);
    const uint64_t n = m.set.requests.front().bytes / esize;
    if (n == 0 || inputs.empty()) continue;
    if (absl::Status s = AdasumTree(dtype, inputs, fusion_buffer_.data() + m.offset, n);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = AdasumAmongNodes(dtype, offsets, total, tag_base); !s.ok()) return s;
  return CopyOut(response, response.prescale * response.postscale);
}

absl::Status HostMultinodeBackend::CopyOut(const Response& response, double scale) {
  const size_t esize = DTypeSize(response.dtype);
  for (const FusedMember& m : response.members) {
    const uint64_t n = m.set.requests.front().bytes / esize;
    if (n == 0) continue;
    std::vector<void*> dsts;
    for (const Request& r : m.set.requests) dsts.push_back(r.output);
    if (absl::Status s = kernels::ScaleCopy(response.dtype, fusion_buffer_.data() + m.offset,
                                            absl::MakeSpan(dsts), n, scale);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status HostMultinodeBackend::RunAllreduce(Response& response, uint64_t tag_base) {
  const DType dtype = response.dtype;
  const size_t esize = DTypeSize(dtype);
  if (esize == 0) return absl::InternalError("unknown dtype in a plan");
  if (response.op == ReduceOp::kAdasum) return RunAdasum(response, tag_base);
  bool in_place = response.compression == Compression::kNone;
  for (const FusedMember& m : response.members) in_place = in_place && m.set.joined == 0;
  if (!in_place) {
    double postscale = 1.0;
    if (absl::Status s = ReduceAmongNodes(response, tag_base, &postscale); !s.ok()) return s;
    return CopyOut(response, postscale);
  }
  // In place: each tensor's local reduction goes into its first local rank's
  // output, the nodes reduce those outputs where they lie (a pieced buffer:
  // no pass through the fusion buffer) and apply the postscale as they do,
  // and the other local ranks copy the result.
  const ReduceOp op = WireOp(response.op);
  double postscale = response.postscale;
  if (response.op == ReduceOp::kAverage) postscale /= static_cast<double>(members_->size());
  std::vector<BufferPiece> pieces;
  pieces.reserve(response.members.size());
  for (const FusedMember& m : response.members) {
    const Request& first = m.set.requests.front();
    const uint64_t n = first.bytes / esize;
    if (n == 0) continue;
    if (m.set.requests.size() > 1 || first.input != first.output || response.prescale != 1.0) {
      std::vector<const void*> srcs;
      for (const Request& r : m.set.requests) srcs.push_back(r.input);
      void* dst = first.output;
      if (absl::Status s = kernels::Reduce(dtype, op, absl::MakeSpan(srcs), absl::MakeSpan(&dst, 1),
                                           n, response.prescale, 1.0);
          !s.ok()) {
        return s;
      }
    }
    pieces.push_back({reinterpret_cast<std::byte*>(first.output), n * esize});
  }
  if (absl::Status s = Allreduce(*active_, PiecedBuffer(pieces), dtype, op, postscale, tag_base,
                                 absl::Now() + kTransferDeadline);
      !s.ok()) {
    return s;
  }
  for (const FusedMember& m : response.members) {
    const uint64_t n = m.set.requests.front().bytes / esize;
    if (n == 0 || m.set.requests.size() == 1) continue;
    std::vector<void*> dsts;
    for (size_t i = 1; i < m.set.requests.size(); ++i) dsts.push_back(m.set.requests[i].output);
    if (absl::Status s =
            kernels::ScaleCopy(dtype, m.set.requests.front().output, absl::MakeSpan(dsts), n, 1.0);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status HostMultinodeBackend::RunBroadcast(Response& response, uint64_t tag_base) {
  const int root = response.root_rank;
  // The root's node, numbered within the nodes of the response's set.
  const int root_node =
      root >= 0 && root < static_cast<int>(active_node_of_->size()) ? (*active_node_of_)[root] : -1;
  if (root_node < 0) return absl::InternalError("broadcast root on no known node");
  const uint64_t total = response.total_bytes;
  if (fusion_buffer_.size() < total) fusion_buffer_.resize(total);
  for (const FusedMember& m : response.members) {
    for (const Request& r : m.set.requests) {
      if (r.rank == root) std::memcpy(fusion_buffer_.data() + m.offset, r.input, r.bytes);
    }
  }
  if (absl::Status s = TreeBroadcast(*active_, fusion_buffer_.data(), total, root_node, tag_base,
                                     absl::Now() + kTransferDeadline);
      !s.ok()) {
    return s;
  }
  for (const FusedMember& m : response.members) {
    for (const Request& r : m.set.requests) {
      if (r.bytes > 0 && r.output != fusion_buffer_.data() + m.offset) {
        std::memcpy(r.output, fusion_buffer_.data() + m.offset, r.bytes);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status HostMultinodeBackend::RunAllgather(Response& response,
                                                const std::vector<int64_t>& rows,
                                                uint64_t tag_base) {
  if (response.members.size() != 1) {
    return absl::InternalError("an allgather response has one tensor");
  }
  FusedMember& member = response.members.front();
  const ReadySet& set = member.set;
  const std::string what = absl::StrCat("allgather \"", set.name, "\"");
  const uint64_t row_bytes = RowBytes(set.requests.front());
  const int job_size = static_cast<int>(node_of_.size());
  if (static_cast<int>(rows.size()) != job_size) {
    return absl::InternalError(absl::StrCat(what, ": the plan gives ", rows.size(),
                                            " row counts for ", job_size, " ranks"));
  }
  // Over the process set's ranks (every rank for set 0), by position.
  const std::vector<int>& members = *members_;
  const int size = static_cast<int>(members.size());
  std::vector<int> node_of(size);
  std::vector<int> position(job_size, -1);
  for (int m = 0; m < size; ++m) {
    node_of[m] = (*active_node_of_)[members[m]];
    position[members[m]] = m;
  }
  auto rows_of = [&](int m) { return static_cast<uint64_t>(rows[members[m]]); };
  // Rank order (the output) and node order (the exchange: each node's ranks
  // as one block). They coincide when every node hosts consecutive ranks.
  std::vector<uint64_t> out_at(size), packed_at(size);
  uint64_t total = 0;
  int64_t total_rows = 0;
  for (int m = 0; m < size; ++m) {
    const int64_t r = rows[members[m]];
    if (r < 0 || node_of[m] < 0 ||
        (row_bytes > 0 && static_cast<uint64_t>(r) > kMaxPlannedBytes / row_bytes)) {
      return absl::InternalError(
          absl::StrCat(what, ": unusable rows ", r, " of rank ", members[m]));
    }
    out_at[m] = total;
    total += rows_of(m) * row_bytes;
    total_rows += r;
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
  if (absl::Status s = RingAllgatherV(*active_, fusion_buffer_.data(), block_at, block_bytes,
                                      tag_base, absl::Now() + kTransferDeadline);
      !s.ok()) {
    return s;
  }
  bool in_rank_order = true;
  for (int m = 0; m < size; ++m) in_rank_order = in_rank_order && packed_at[m] == out_at[m];
  // Each local rank gets the result in its result area.
  for (size_t i = 0; i < set.requests.size(); ++i) {
    absl::StatusOr<uint8_t*> dst = results_->Allocate(member, total, total_rows);
    if (!dst.ok()) return dst.status();
    if (in_rank_order) {
      if (total > 0) std::memcpy(*dst, fusion_buffer_.data(), total);
      continue;
    }
    for (int q = 0; q < size; ++q) {
      const uint64_t bytes = rows_of(q) * row_bytes;
      if (bytes > 0) std::memcpy(*dst + out_at[q], fusion_buffer_.data() + packed_at[q], bytes);
    }
  }
  return absl::OkStatus();
}

namespace {

// One alltoall among the nodes, by position in the process set: where each
// rank lives, which ranks are here, and what the plan says each sends.
struct AlltoallLayout {
  int size = 0;
  uint64_t row_bytes = 0;
  const std::vector<int64_t>* splits = nullptr;  // size x size rows, i to j
  std::vector<int> node_of;                      // by position
  std::vector<const Request*> local;             // by position, this node's
  int me = 0;

  uint64_t Bytes(int i, int j) const {
    return static_cast<uint64_t>((*splits)[i * size + j]) * row_bytes;
  }
  // Where rank i's rows for rank j start in i's input.
  uint64_t SrcOffset(int i, int j) const {
    uint64_t before = 0;
    for (int k = 0; k < j; ++k) before += Bytes(i, k);
    return before;
  }
};

// The messages between this node and each other node: for each source rank
// of the sender (ascending), its rows for each destination rank of the
// receiver (ascending). `in_at[i * size + j]`: where (i, j) lands in
// in[node of i].
void PackAlltoall(const AlltoallLayout& l, int nodes, std::vector<std::vector<uint8_t>>* out,
                  std::vector<std::vector<uint8_t>>* in, std::vector<uint64_t>* in_at) {
  out->assign(nodes, {});
  in->assign(nodes, {});
  in_at->assign(static_cast<size_t>(l.size) * l.size, 0);
  for (int b = 0; b < nodes; ++b) {
    if (b == l.me) continue;
    for (int i = 0; i < l.size; ++i) {
      for (int j = 0; j < l.size; ++j) {
        const uint64_t bytes = l.Bytes(i, j);
        if (l.node_of[i] == l.me && l.node_of[j] == b && bytes > 0) {
          const uint8_t* src = l.local[i]->input + l.SrcOffset(i, j);
          (*out)[b].insert((*out)[b].end(), src, src + bytes);
        }
        if (l.node_of[i] == b && l.node_of[j] == l.me) {
          (*in_at)[static_cast<size_t>(i) * l.size + j] = (*in)[b].size();
          (*in)[b].resize((*in)[b].size() + bytes);
        }
      }
    }
  }
}

// Rank j's result as on one node: a header of the rows received from each
// rank, then those rows in rank order.
void WriteAlltoallResult(const AlltoallLayout& l, int j,
                         const std::vector<std::vector<uint8_t>>& in,
                         const std::vector<uint64_t>& in_at, uint8_t* dst) {
  auto* counts = reinterpret_cast<int64_t*>(dst);
  uint64_t at = abi::v1::AlltoallResultHeaderBytes(static_cast<uint64_t>(l.size));
  for (int i = 0; i < l.size; ++i) {
    counts[i] = (*l.splits)[i * l.size + j];
    const uint64_t len = l.Bytes(i, j);
    if (len == 0) continue;
    const uint8_t* src = l.node_of[i] == l.me
                             ? l.local[i]->input + l.SrcOffset(i, j)
                             : in[l.node_of[i]].data() + in_at[static_cast<size_t>(i) * l.size + j];
    std::memcpy(dst + at, src, len);
    at += len;
  }
}

}  // namespace

absl::Status HostMultinodeBackend::RunAlltoall(Response& response,
                                               const std::vector<int64_t>& splits,
                                               uint64_t tag_base) {
  if (response.members.size() != 1) {
    return absl::InternalError("an alltoall response has one tensor");
  }
  FusedMember& member = response.members.front();
  const ReadySet& set = member.set;
  const std::string what = absl::StrCat("alltoall \"", set.name, "\"");
  // Over the process set's ranks (every rank for set 0), by position.
  const std::vector<int>& members = *members_;
  AlltoallLayout l;
  l.size = static_cast<int>(members.size());
  l.row_bytes = RowBytes(set.requests.front());
  l.splits = &splits;
  l.me = active_->node();
  if (splits.size() != static_cast<size_t>(l.size) * l.size) {
    return absl::InternalError(
        absl::StrCat(what, ": the plan gives ", splits.size(), " splits for ", l.size, " ranks"));
  }
  for (int64_t v : splits) {
    if (v < 0 || v > static_cast<int64_t>(kMaxPlannedBytes)) {
      return absl::InternalError(absl::StrCat(what, ": unusable split ", v));
    }
  }
  std::vector<int> position(node_of_.size(), -1);
  l.node_of.resize(l.size);
  for (int m = 0; m < l.size; ++m) {
    l.node_of[m] = (*active_node_of_)[members[m]];
    position[members[m]] = m;
  }
  l.local.assign(l.size, nullptr);
  for (const Request& r : set.requests) {
    const int at = position[r.rank];
    if (at < 0) {
      return absl::InternalError(absl::StrCat(what, ": rank ", r.rank, " is not in its set"));
    }
    // What the plan says this rank sends must be what it holds.
    uint64_t sent = 0;
    for (int j = 0; j < l.size; ++j) sent += l.Bytes(at, j);
    if (sent != r.bytes) {
      return absl::InternalError(
          absl::StrCat(what, ": rank ", r.rank, " has ", r.bytes, " bytes, the plan sends ", sent));
    }
    l.local[at] = &r;
  }
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<uint64_t> in_at;
  PackAlltoall(l, active_->nodes(), &out, &in, &in_at);
  std::vector<absl::Span<const uint8_t>> send(out.begin(), out.end());
  std::vector<absl::Span<uint8_t>> recv;
  for (std::vector<uint8_t>& b : in) recv.emplace_back(absl::MakeSpan(b));
  if (absl::Status s =
          PairwiseAlltoall(*active_, send, recv, tag_base, absl::Now() + kTransferDeadline);
      !s.ok()) {
    return s;
  }
  const uint64_t header = abi::v1::AlltoallResultHeaderBytes(static_cast<uint64_t>(l.size));
  for (const Request& r : set.requests) {
    const int j = position[r.rank];
    int64_t received = 0;
    for (int i = 0; i < l.size; ++i) received += splits[i * l.size + j];
    const uint64_t bytes = header + static_cast<uint64_t>(received) * l.row_bytes;
    absl::StatusOr<uint8_t*> dst = results_->Allocate(member, bytes, received);
    if (!dst.ok()) return dst.status();
    WriteAlltoallResult(l, j, in, in_at, *dst);
  }
  return absl::OkStatus();
}

absl::Status HostMultinodeBackend::RunReducescatter(Response& response, uint64_t tag_base) {
  const DType dtype = response.dtype;
  const size_t esize = DTypeSize(dtype);
  // The whole tensors are reduced among the nodes (as an allreduce), then
  // each local rank takes its rows: rank r gets total/size rows, one more
  // when r < total % size, in rank order (as on one node).
  double postscale = 1.0;
  if (absl::Status s = ReduceAmongNodes(response, tag_base, &postscale); !s.ok()) return s;
  // Slices by position in the process set (every rank for set 0).
  const std::vector<int>& members = *members_;
  const int64_t size = static_cast<int64_t>(members.size());
  std::vector<int64_t> position(node_of_.size(), -1);
  for (int64_t m = 0; m < size; ++m) position[members[m]] = m;
  for (FusedMember& m : response.members) {
    const Request& q = m.set.requests.front();
    const int64_t total_rows = q.shape.empty() ? 0 : q.shape[0];
    const uint64_t row_bytes = total_rows > 0 ? q.bytes / static_cast<uint64_t>(total_rows) : 0;
    for (const Request& r : m.set.requests) {
      const int64_t at = position[r.rank];
      const int64_t rows = total_rows / size + (at < total_rows % size ? 1 : 0);
      const int64_t first_row = at * (total_rows / size) + std::min<int64_t>(at, total_rows % size);
      const uint64_t bytes = static_cast<uint64_t>(rows) * row_bytes;
      absl::StatusOr<uint8_t*> dst = results_->Allocate(m, bytes, rows);
      if (!dst.ok()) return dst.status();
      if (bytes == 0) continue;
      void* out = *dst;
      if (absl::Status s = kernels::ScaleCopy(
              dtype,
              fusion_buffer_.data() + m.offset + static_cast<uint64_t>(first_row) * row_bytes,
              absl::MakeSpan(&out, 1), bytes / esize, postscale);
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon
