// What each collective is: one row per CollectiveKind, read by the client,
// kolod's validation, planning and backends, and (through kolo._core) the
// Python modules. A rule that depends on the kind asks this table; adding a
// collective is a row here plus its function in each backend
// (docs/internals.md, "Adding a collective").
//
// Thread-safety: constant data and constexpr functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "proto/kolo/abi/types.h"

namespace kolo {

struct CollectiveTraits {
  CollectiveKind kind = static_cast<CollectiveKind>(0);
  // The name users, logs and metrics see.
  const char* name = "";
  // Moves a tensor on a backend (allreduce ... alltoall); the others are
  // barrier and the control ops.
  bool tensor = false;
  // Completes in the job, not on a backend (join, process-set changes), and
  // involves every rank of the job, never a process set.
  bool control = false;
  // Changes the job's process sets.
  bool set_change = false;
  // Its output is a new tensor kolod places in the session's result area
  // (its size is known only once every rank submitted).
  bool returns_result = false;
  // Ranks may differ in the first dimension, so a response's layout depends
  // on every rank's rows; never fused, never a cache bit.
  bool per_rank_rows = false;
  // Needs a tensor of at least one dimension.
  bool needs_first_dim = false;
  // Takes a reduction operator and scale factors.
  bool reduces = false;
  // One rank's tensor goes to every rank (a root rank).
  bool rooted = false;
  // Carries per-rank splits of its first dimension (in the aux array).
  bool splits = false;
  // Output has the input's size and may be the same buffer: in place, in
  // parts, in caller memory.
  bool in_place = false;
  // Several of one kind may share one response (fusion).
  bool fuses = false;
  // May be submitted as one group of tensors negotiated together.
  bool groups = false;
  // May run while ranks of its set have joined (they contribute zeros to a
  // reduction, nothing to a barrier). The others, broadcast among them as in
  // Horovod, fail on the ranks that submitted them.
  bool runs_with_joined = false;
  // Runs on device (CUDA) memory through NCCL.
  bool device = false;
  // Its float32 data may travel as 16 bits (Compression).
  bool compresses = false;
  // Reads an auxiliary array from the slot (splits, a set's ranks or id).
  bool takes_aux = false;
};

// Indexed by CollectiveKind's value; row 0 is no collective. A trait not
// named in a row is false.
inline constexpr CollectiveTraits kCollectiveTraits[] = {
    {.kind = static_cast<CollectiveKind>(0), .name = "invalid-collective"},
    {.kind = CollectiveKind::kAllreduce,
     .name = "allreduce",
     .tensor = true,
     .reduces = true,
     .in_place = true,
     .fuses = true,
     .groups = true,
     .runs_with_joined = true,
     .device = true,
     .compresses = true},
    {.kind = CollectiveKind::kBroadcast,
     .name = "broadcast",
     .tensor = true,
     .rooted = true,
     .in_place = true,
     .fuses = true,
     .device = true},
    {.kind = CollectiveKind::kAllgather,
     .name = "allgather",
     .tensor = true,
     .returns_result = true,
     .per_rank_rows = true,
     .needs_first_dim = true,
     .groups = true,
     .device = true},
    {.kind = CollectiveKind::kReducescatter,
     .name = "reducescatter",
     .tensor = true,
     .returns_result = true,
     .needs_first_dim = true,
     .reduces = true,
     .fuses = true,
     .groups = true,
     .device = true},
    {.kind = CollectiveKind::kAlltoall,
     .name = "alltoall",
     .tensor = true,
     .returns_result = true,
     .per_rank_rows = true,
     .needs_first_dim = true,
     .splits = true,
     .takes_aux = true},
    {.kind = CollectiveKind::kBarrier, .name = "barrier", .fuses = true, .runs_with_joined = true},
    {.kind = CollectiveKind::kJoin, .name = "join", .control = true},
    {.kind = CollectiveKind::kAddProcessSet,
     .name = "add_process_set",
     .control = true,
     .set_change = true,
     .takes_aux = true},
    {.kind = CollectiveKind::kRemoveProcessSet,
     .name = "remove_process_set",
     .control = true,
     .set_change = true,
     .takes_aux = true},
};

inline constexpr size_t kNumCollectiveRows =
    sizeof(kCollectiveTraits) / sizeof(kCollectiveTraits[0]);
static_assert(kNumCollectiveRows == kMaxCollectiveKind + 1,
              "every CollectiveKind has a row in kCollectiveTraits");

// Whether `code` (a wire or slot value) names a collective.
constexpr bool IsCollectiveKind(uint32_t code) { return code >= 1 && code <= kMaxCollectiveKind; }

// The row of `k`; row 0 (every trait false) for a value outside the enum.
constexpr const CollectiveTraits& Traits(CollectiveKind k) {
  const auto code = static_cast<uint32_t>(k);
  return kCollectiveTraits[IsCollectiveKind(code) ? code : 0];
}

constexpr const char* CollectiveKindName(CollectiveKind k) { return Traits(k).name; }

// Shorthands for the traits most rules ask.
constexpr bool ReturnsResult(CollectiveKind k) { return Traits(k).returns_result; }
constexpr bool IsSetChange(CollectiveKind k) { return Traits(k).set_change; }
constexpr bool HasPerRankRows(CollectiveKind k) { return Traits(k).per_rank_rows; }
constexpr bool IsControl(CollectiveKind k) { return Traits(k).control; }
// Each rank's rows travel as rows (allgather); alltoall's travel as splits.
constexpr bool ReportsRows(CollectiveKind k) {
  return Traits(k).per_rank_rows && !Traits(k).splits;
}

// The kinds that have `trait`, in wire order, for messages: "allreduce and
// broadcast", "allreduce, allgather and reducescatter".
inline std::string KindsWith(bool CollectiveTraits::*trait) {
  std::string out;
  size_t count = 0;
  for (size_t i = 1; i < kNumCollectiveRows; ++i) count += kCollectiveTraits[i].*trait ? 1 : 0;
  size_t seen = 0;
  for (size_t i = 1; i < kNumCollectiveRows; ++i) {
    if (!(kCollectiveTraits[i].*trait)) continue;
    if (seen > 0) out += seen + 1 == count ? " and " : ", ";
    out += kCollectiveTraits[i].name;
    ++seen;
  }
  return out;
}

// Every row's kind is its index: a row cannot sit in the wrong place.
constexpr bool RowsInOrder() {
  for (size_t i = 1; i < kNumCollectiveRows; ++i) {
    if (static_cast<size_t>(kCollectiveTraits[i].kind) != i) return false;
  }
  return true;
}
static_assert(RowsInOrder(), "kCollectiveTraits is indexed by CollectiveKind");

}  // namespace kolo
