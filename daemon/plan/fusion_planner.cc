#include "daemon/plan/fusion_planner.h"

#include <utility>

#include "daemon/plan/fusion.h"
#include "daemon/plan/tensor_desc.h"

namespace kolo::daemon {

std::vector<Response> PlanFusion(std::vector<ReadySet> ready, uint64_t fusion_threshold_bytes) {
  std::vector<Response> out;
  if (ready.size() == 1) {
    // The latency path: one name is a group of its own, laid out at offset
    // 0 (what GroupForFusion would say, without building its candidates).
    const Request& r = ready.front().requests.front();
    Response& one = out.emplace_back();
    one.kind = r.kind;
    one.dtype = r.dtype;
    one.op = r.op;
    one.prescale = r.prescale;
    one.postscale = r.postscale;
    one.root_rank = r.root_rank;
    one.process_set = r.process_set;
    one.compression = r.compression;
    one.on_device = r.device.has_value();
    one.total_bytes = r.bytes;
    one.members.push_back(FusedMember{std::move(ready.front()), 0, {}, {}});
    return out;
  }
  std::vector<plan::FusionCandidate> candidates;
  candidates.reserve(ready.size());
  for (const ReadySet& set : ready) {
    candidates.push_back({plan::DescOf(set.requests.front()), {}});
  }
  for (const plan::FusionGroup& g : plan::GroupForFusion(candidates, fusion_threshold_bytes)) {
    const plan::TensorDesc& key = candidates[g.members.front()].desc;
    Response& r = out.emplace_back();
    r.kind = key.kind;
    r.dtype = key.dtype;
    r.op = key.op;
    r.prescale = key.prescale;
    r.postscale = key.postscale;
    r.root_rank = key.root_rank;
    r.process_set = key.process_set;
    r.compression = key.compression;
    r.on_device = key.on_device;
    r.total_bytes = g.layout.total_bytes;
    for (size_t m = 0; m < g.members.size(); ++m) {
      r.members.push_back(FusedMember{std::move(ready[g.members[m]]), g.layout.offsets[m], {}, {}});
    }
  }
  return out;
}

}  // namespace kolo::daemon
