#include "daemon/fusion_planner.h"

#include <utility>

namespace kolo::daemon {
namespace {

// Members of one fused buffer start on 64-byte boundaries so SIMD kernels
// and device copies see aligned data.
constexpr uint64_t kMemberAlignment = 64;

uint64_t Align(uint64_t v) {
  return (v + kMemberAlignment - 1) & ~(kMemberAlignment - 1);
}

// Device tensors and host tensors never share a response (they run on
// different backends); ranks' GPUs may differ (each is an NCCL rank).
bool OnDevice(const Request& r) { return r.device.has_value(); }

bool SameGroup(const Response& g, const Request& r) {
  if (g.kind != r.kind || g.dtype != r.dtype || g.process_set != r.process_set ||
      g.on_device != OnDevice(r)) {
    return false;
  }
  switch (r.kind) {
    case CollectiveKind::kBroadcast:
      return g.root_rank == r.root_rank;
    case CollectiveKind::kAllreduce:
    case CollectiveKind::kReducescatter:
      return g.op == r.op && g.prescale == r.prescale &&
             g.postscale == r.postscale && g.compression == r.compression;
    default:
      return true;
  }
}

}  // namespace

std::vector<Response> PlanFusion(std::vector<ReadySet> ready,
                                 uint64_t fusion_threshold_bytes) {
  std::vector<Response> out;
  // Groups still accepting members, by index into `out`.
  std::vector<size_t> open;
  for (ReadySet& set : ready) {
    const Request& r = set.requests.front();
    Response* target = nullptr;
    for (size_t i : open) {
      Response& g = out[i];
      if (SameGroup(g, r) &&
          Align(g.total_bytes) + r.bytes <= fusion_threshold_bytes) {
        target = &g;
        break;
      }
    }
    if (target == nullptr) {
      Response g;
      g.kind = r.kind;
      g.dtype = r.dtype;
      g.op = r.op;
      g.prescale = r.prescale;
      g.postscale = r.postscale;
      g.root_rank = r.root_rank;
      g.process_set = r.process_set;
      g.compression = r.compression;
      g.on_device = OnDevice(r);
      out.push_back(std::move(g));
      open.push_back(out.size() - 1);
      target = &out.back();
    }
    uint64_t offset = Align(target->total_bytes);
    uint64_t bytes = r.bytes;
    target->members.push_back(FusedMember{std::move(set), offset, {}, {}});
    target->total_bytes = offset + bytes;
  }
  return out;
}

}  // namespace kolo::daemon
