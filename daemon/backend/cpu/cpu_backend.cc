#include "daemon/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <vector>

#include "absl/types/span.h"
#include "kernels/cpu/reduce.h"

namespace kolo::daemon {
namespace {

// A contiguous element range of one member.
struct Chunk {
  const FusedMember* member;
  uint64_t first;  // element index
  uint64_t count;
};

}  // namespace

absl::Status CpuBackend::Execute(const Response& response, int job_size) {
  const size_t esize = DTypeSize(response.dtype);
  ReduceOp op = response.op;
  double postscale = response.postscale;
  if (op == ReduceOp::kAverage) {
    op = ReduceOp::kSum;
    postscale /= job_size;
  }
  const uint64_t chunk_elems = std::max<uint64_t>(1, chunk_bytes_ / esize);

  std::vector<Chunk> chunks;
  for (const FusedMember& m : response.members) {
    uint64_t n = m.set.requests.front().bytes / esize;
    for (uint64_t first = 0; first < n; first += chunk_elems) {
      chunks.push_back(Chunk{&m, first, std::min(chunk_elems, n - first)});
    }
  }

  std::vector<absl::Status> errors(chunks.size());
  auto run = [&](size_t i) {
    const Chunk& c = chunks[i];
    const std::vector<Request>& reqs = c.member->set.requests;
    const uint64_t byte_off = c.first * esize;
    std::vector<void*> dsts;
    dsts.reserve(reqs.size());
    if (response.kind == CollectiveKind::kBroadcast) {
      const uint8_t* src = reqs[response.root_rank].input + byte_off;
      for (const Request& r : reqs) {
        if (r.output + byte_off != src) dsts.push_back(r.output + byte_off);
      }
      if (dsts.empty()) return;
      errors[i] = kernels::ScaleCopy(response.dtype, src, absl::MakeSpan(dsts),
                                     c.count, 1.0);
      return;
    }
    std::vector<const void*> srcs;
    srcs.reserve(reqs.size());
    for (const Request& r : reqs) {
      srcs.push_back(r.input + byte_off);
      dsts.push_back(r.output + byte_off);
    }
    errors[i] = kernels::Reduce(response.dtype, op, absl::MakeSpan(srcs),
                                absl::MakeSpan(dsts), c.count,
                                response.prescale, postscale);
  };

  if (response.total_bytes < parallel_threshold_ || chunks.size() < 2) {
    for (size_t i = 0; i < chunks.size(); ++i) run(i);
  } else {
    pool_->ParallelFor(chunks.size(), run);
  }
  for (const absl::Status& s : errors) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon
