#include "daemon/plan/fusion.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon::plan {

bool Fusable(const TensorDesc& a, const TensorDesc& b) {
  if (a.kind != b.kind || a.dtype != b.dtype || a.process_set != b.process_set ||
      a.on_device != b.on_device) {
    return false;
  }
  const CollectiveTraits& t = Traits(a.kind);
  if (!t.fuses) return false;
  if (t.rooted && a.root_rank != b.root_rank) return false;
  if (t.reduces) {
    return a.op == b.op && a.prescale == b.prescale && a.postscale == b.postscale &&
           a.compression == b.compression;
  }
  return true;
}

FusionLayout LayOut(absl::Span<const uint64_t> member_bytes) {
  FusionLayout layout;
  layout.offsets.reserve(member_bytes.size());
  for (uint64_t bytes : member_bytes) {
    const uint64_t offset = AlignMember(layout.total_bytes);
    layout.offsets.push_back(offset);
    layout.total_bytes = offset + bytes;
  }
  return layout;
}

std::vector<FusionGroup> GroupForFusion(absl::Span<const FusionCandidate> candidates,
                                        uint64_t threshold_bytes) {
  std::vector<FusionGroup> groups;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const FusionCandidate& c = candidates[i];
    FusionGroup* target = nullptr;
    for (FusionGroup& g : groups) {
      const FusionCandidate& first = candidates[g.members.front()];
      if (Fusable(first.desc, c.desc) && first.apart_key == c.apart_key &&
          AlignMember(g.layout.total_bytes) + c.desc.bytes <= threshold_bytes) {
        target = &g;
        break;
      }
    }
    if (target == nullptr) target = &groups.emplace_back();
    const uint64_t offset = AlignMember(target->layout.total_bytes);
    target->members.push_back(i);
    target->layout.offsets.push_back(offset);
    target->layout.total_bytes = offset + c.desc.bytes;
  }
  return groups;
}

}  // namespace kolo::daemon::plan
