#include "daemon/plan/tensor_meta.h"

#include <algorithm>
#include <string>
#include <vector>

#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon::plan {
namespace {

int64_t Rows(const Request& r) { return r.shape.empty() ? 0 : r.shape[0]; }

}  // namespace

std::vector<const Request*> ByRank(const ReadySet& set) {
  std::vector<const Request*> by_rank;
  for (const Request& q : set.requests) by_rank.push_back(&q);
  std::sort(by_rank.begin(), by_rank.end(),
            [](const Request* a, const Request* b) { return a->rank < b->rank; });
  return by_rank;
}

kolo::v1::TensorMeta MetaOf(const ReadySet& set, int job_size) {
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
  m.set_group_size(r.group_size);
  if (r.kind == CollectiveKind::kJoin && !r.aux.empty()) m.add_aux(r.aux.front());
  if (IsSetChange(r.kind)) {
    for (int64_t v : r.aux) m.add_aux(v);
  }
  m.set_compression(static_cast<uint32_t>(r.compression));
  if (ReportsRows(r.kind)) {
    for (const Request* q : ByRank(set)) m.add_rows(Rows(*q));
  }
  if (Traits(r.kind).splits) {
    // Even splits among the set's ranks (the job checked they divide).
    const int n = set.set_size > 0 ? set.set_size : job_size;
    for (const Request* q : ByRank(set)) {
      if (!q->aux.empty()) {
        for (int64_t v : q->aux) m.add_splits(v);
        continue;
      }
      for (int j = 0; j < n; ++j) m.add_splits(n > 0 ? Rows(*q) / n : 0);
    }
  }
  if (!set.agreement.ok()) m.set_local_error(std::string(set.agreement.message()));
  return m;
}

}  // namespace kolo::daemon::plan
