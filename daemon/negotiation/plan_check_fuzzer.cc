// Fuzzes the checks a node runs on what the coordinator sends it: a planned
// entry (rows, splits, joined nodes, last joined rank) against this node's
// parked sets (requests as the slot validator could have accepted them:
// valid kinds and dtypes, shapes and aux arrays from the input), the joined
// entry, and the Welcome. The plan is hostile; the parked sets are this
// node's own. Nothing may crash or overflow, and an accepted allgather or
// alltoall entry must move no more than kMaxPlannedTensorBytes per rank.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "daemon/coordinator/fuzz_messages.h"
#include "daemon/negotiation/plan_check.h"
#include "tools/fuzz/fuzz_input.h"

namespace kolo::daemon {
namespace {

// One parked set of `kind` for this node's `ranks` (none when `empty`).
ReadySet ParkedFrom(fuzz::FuzzInput& in, CollectiveKind kind, const std::vector<int>& ranks,
                    bool empty) {
  ReadySet set;
  set.name = std::string(1, static_cast<char>('a' + in.Take<uint8_t>() % 3));
  if (empty) return set;
  const uint8_t raw = in.Take<uint8_t>();
  for (int r : ranks) {
    Request q;
    q.rank = r;
    q.kind = (raw & 1) ? static_cast<CollectiveKind>(1 + in.Take<uint8_t>() % 9) : kind;
    q.dtype = static_cast<DType>(in.Take<uint8_t>() % kNumDTypes);
    uint64_t elements = 1;
    for (int d = in.Take<uint8_t>() % 4; d > 0; --d) {
      int64_t dim = (raw & 2) ? in.Take<int64_t>() : in.Take<uint8_t>() % 16;
      q.shape.push_back(dim);
      elements *= static_cast<uint64_t>(dim);
    }
    q.bytes = elements * DTypeSize(q.dtype);
    for (int a = in.Take<uint8_t>() % 10; a > 0; --a) q.aux.push_back(in.TakeSmall(raw & 4));
    set.requests.push_back(std::move(q));
  }
  set.set_size = in.Take<uint8_t>() % 10;
  return set;
}

void Run(fuzz::FuzzInput& in) {
  const int job_size = 1 + in.Take<uint8_t>() % 8;
  const int nodes = 1 + in.Take<uint8_t>() % 4;
  const uint8_t mine = in.Take<uint8_t>();
  std::vector<int> ranks;
  for (int r = 0; r < job_size; ++r) {
    if (mine & (1 << r)) ranks.push_back(r);
  }
  if (ranks.empty()) ranks.push_back(0);

  const uint8_t shape = in.Take<uint8_t>();
  const CollectiveKind kind = static_cast<CollectiveKind>(1 + shape % 9);
  std::vector<ReadySet> sets;
  for (int s = (shape >> 4) % 4; s > 0; --s) {
    sets.push_back(ParkedFrom(in, kind, ranks, in.Take<uint8_t>() == 0xff));
  }
  std::vector<int> set_ranks;
  const bool have_set_ranks = shape & 0x40;
  if (have_set_ranks) {
    const uint8_t bits = in.Take<uint8_t>();
    for (int r = 0; r < job_size; ++r) {
      if (bits & (1 << r)) set_ranks.push_back(r);
    }
  }

  PlannedEntry entry;
  for (const ReadySet& s : sets) entry.names.push_back("0:" + s.name);
  const uint8_t raw = in.Take<uint8_t>();
  entry.last_joined = static_cast<int>(in.TakeSmall(false));
  for (int i = in.Take<uint8_t>() % 4; i > 0; --i) entry.joined_nodes.push_back(in.Take<int8_t>());
  if (raw & 1) entry.error = absl::InvalidArgumentError("disagreed");
  const size_t rows =
      (raw & 2) ? in.Take<uint8_t>() % 12 : (kind == CollectiveKind::kAllgather ? job_size : 0);
  for (size_t i = 0; i < rows; ++i) entry.rows.push_back(in.TakeSmall(raw & 4));
  const size_t n = have_set_ranks ? set_ranks.size() : job_size;
  const size_t splits =
      (raw & 8) ? in.Take<uint8_t>() % 70 : (kind == CollectiveKind::kAlltoall ? n * n : 0);
  for (size_t i = 0; i < splits; ++i) entry.splits.push_back(in.TakeSmall(raw & 16));
  (void)CheckPlannedEntry(entry, sets, job_size, have_set_ranks ? &set_ranks : nullptr, nodes);

  for (int i = in.Take<uint8_t>() % 3; i > 0; --i) {
    entry.metas.push_back(TensorMetaFrom(in, job_size));
  }
  (void)CheckJoinedEntry(entry, nodes);

  kolo::v1::Welcome welcome;
  welcome.set_node_index(in.Take<int8_t>());
  for (int i = in.Take<uint8_t>() % 5; i > 0; --i) {
    kolo::v1::NodeEntry* e = welcome.add_nodes();
    e->set_node(in.TakeString(8));
    for (int r = in.Take<uint8_t>() % 5; r > 0; --r) e->add_ranks(in.Take<int8_t>());
    e->set_ucx_address(in.TakeString(16));
  }
  (void)CheckWelcome(welcome, job_size, ranks, "own");
}

}  // namespace
}  // namespace kolo::daemon

KOLO_FUZZ_TARGET(kolo::daemon::Run)
