// NcclBackend's allgather: the layout of every rank's rows in one region per
// lane and their placement (see PrepareAllgather in nccl_backend.h).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/backend/nccl/nccl_backend.h"
#include "daemon/backend/nccl/nccl_lane.h"

namespace kolo::daemon::nccl {

using layout::AlignUp;
using layout::Describe;
using layout::Distinct;
using layout::kMemberAlign;
using layout::kRegionAlign;

int NcclBackend::Position(int rank) const {
  if (step_ == nullptr || step_->set_ranks == nullptr) return rank;
  const std::vector<int>& ranks = *step_->set_ranks;
  auto it = std::lower_bound(ranks.begin(), ranks.end(), rank);
  return it != ranks.end() && *it == rank ? static_cast<int>(it - ranks.begin()) : -1;
}

absl::StatusOr<bool> NcclBackend::PrepareAllgather(Response& response,
                                                   std::vector<ResolvedIo>* holds) {
  const std::string what = Describe(response);
  const bool spans_daemons = comm_->size() > static_cast<int>(lanes_.size());
  const std::vector<int64_t>& plan_rows = step_->rows;
  if (response.members.empty() || (!plan_rows.empty() && response.members.size() != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": malformed response"));
  }
  // Per member: each position's bytes, where they start, and the total.
  struct Layout {
    std::vector<uint64_t> at;
    std::vector<uint64_t> bytes;
    uint64_t total = 0;
  };
  std::vector<Layout> layouts;
  offsets_.clear();
  uint64_t fused = 0;
  for (FusedMember& m : response.members) {
    if (m.set.requests.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": a member without requests"));
    }
    const uint64_t row = RowBytes(m.set.requests.front());
    const int n = std::max(1, m.set.set_size);
    Layout l;
    l.bytes.assign(n, 0);
    if (!plan_rows.empty()) {
      // Across daemons: every rank's rows, from the plan.
      for (int pos = 0; pos < n; ++pos) {
        const int rank = step_->set_ranks != nullptr ? (*step_->set_ranks)[pos] : pos;
        if (rank < 0 || rank >= static_cast<int>(plan_rows.size()) || plan_rows[rank] < 0 ||
            (row > 0 && static_cast<uint64_t>(plan_rows[rank]) > (uint64_t{1} << 48) / row)) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": the plan gives no usable rows for rank ", rank));
        }
        l.bytes[pos] = static_cast<uint64_t>(plan_rows[rank]) * row;
      }
    } else if (spans_daemons) {
      return absl::InternalError(absl::StrCat(what, ": an allgather across daemons without rows"));
    } else if (static_cast<int>(m.set.requests.size()) != n) {
      m.status = absl::FailedPreconditionError(absl::StrCat(
          "allgather \"", m.set.name, "\": ", n - static_cast<int>(m.set.requests.size()),
          " rank(s) joined; an allgather needs every rank's tensor"));
    } else {
      for (const Request& r : m.set.requests) {
        const int pos = Position(r.rank);
        if (pos < 0 || pos >= n) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": rank ", r.rank, " is not in the process set"));
        }
        l.bytes[pos] = r.bytes;
      }
    }
    l.at.assign(n, 0);
    for (int pos = 0; pos < n; ++pos) {
      l.at[pos] = l.total;
      l.total += l.bytes[pos];
    }
    fused = AlignUp(fused, kMemberAlign);
    offsets_.push_back(fused);
    fused += l.total;
    layouts.push_back(std::move(l));
  }
  count_ = fused;  // bytes
  region_ = AlignUp(fused, kRegionAlign);
  compress_ = false;
  op_ = ReduceOp::kSum;
  postscale_ = 1.0;
  root_ = -1;
  for (auto& lane : lanes_) {
    if (absl::Status s = lane->Reset(region_); !s.ok()) return s;
    // Other lanes add their parts: what this one does not write is zero.
    if (comm_->size() > 1 && fused > 0) lane->zero.push_back({lane->region(0, region_), fused});
  }
  for (size_t mi = 0; mi < response.members.size(); ++mi) {
    FusedMember& m = response.members[mi];
    const Layout& l = layouts[mi];
    std::vector<std::pair<const Request*, Slot>> placed;
    std::vector<ResolvedIo> resolved;
    for (const Request& r : m.set.requests) {
      if (!m.status.ok()) break;
      auto it = slots_.find(r.rank);
      if (it == slots_.end()) {
        m.status = absl::FailedPreconditionError(absl::StrCat(
            "allgather \"", m.set.name, "\": rank ", r.rank,
            " has no GPU in the job's communicator (its first device tensor places it)"));
        break;
      }
      const Lane& lane = *lanes_[it->second.lane];
      if (r.device.has_value() && r.device->input.device != lane.place.device) {
        m.status = absl::FailedPreconditionError(absl::StrCat(
            "allgather \"", m.set.name, "\": rank ", r.rank, " sent a tensor on CUDA device ",
            r.device->input.device, "; its GPU in this job is device ", lane.place.device));
        break;
      }
      if (absl::Status s = lane.device.MakeCurrent(); !s.ok()) return s;
      absl::StatusOr<ResolvedIo> io = resolver_->Resolve(r);
      if (!io.ok()) {
        m.status = io.status();
        break;
      }
      if (io->output.bytes != l.total) {
        m.status = absl::InvalidArgumentError(
            absl::StrCat("allgather \"", m.set.name, "\": rank ", r.rank, "'s output has ",
                         io->output.bytes, " bytes; the gathered tensor has ", l.total));
        break;
      }
      placed.push_back({&r, it->second});
      resolved.push_back(std::move(*io));
    }
    if (!m.status.ok()) continue;  // no part of it is written or read
    for (size_t k = 0; k < placed.size(); ++k) {
      const auto& [r, slot] = placed[k];
      const ResolvedIo& io = resolved[k];
      Lane& lane = *lanes_[slot.lane];
      uint8_t* gathered = lane.region(0, region_) + offsets_[mi];
      const int pos = Position(r->rank);
      if (l.bytes[pos] > 0) {
        lane.pack.push_back(CopySegment{reinterpret_cast<uint64_t>(io.input.data),
                                        reinterpret_cast<uint64_t>(gathered + l.at[pos]),
                                        l.bytes[pos], 0});
      }
      if (io.input.event != nullptr) lane.wait_events.push_back(io.input.event);
      if (l.total > 0) {
        lane.unpack.push_back(CopySegment{reinterpret_cast<uint64_t>(gathered),
                                          reinterpret_cast<uint64_t>(io.output.data), l.total, 0});
      }
      if (io.output.event != nullptr) lane.record_events.push_back(io.output.event);
    }
    for (ResolvedIo& io : resolved) holds->push_back(std::move(io));
  }
  for (auto& lane : lanes_) {
    lane->wait_events = Distinct(std::move(lane->wait_events));
    lane->record_events = Distinct(std::move(lane->record_events));
  }
  return true;
}

}  // namespace kolo::daemon::nccl
