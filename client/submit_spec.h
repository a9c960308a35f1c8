// SubmitSpec: everything one submission says, built by the Client methods
// and handed to ClientImpl::Submit; and the checks the client makes on it
// before touching the arena (kolod checks it all again: these are for
// clear errors at the caller's line).
//
// Thread-safety: a value type and free functions; no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "kolo/kolo.h"

namespace kolo {

struct SubmitSpec {
  CollectiveKind kind;
  ConstTensorView input;
  // Allreduce and broadcast; device allgather and reducescatter (the others
  // return a new tensor in the result area).
  TensorView output;
  std::string_view name;
  AllreduceOptions reduce;
  int root_rank = 0;
  int process_set = kGlobalProcessSet;
  uint64_t group_id = 0;
  uint32_t group_size = 0;
  std::vector<int64_t> aux;  // alltoall splits, process-set ranks
  // A part of a larger tensor (abi kSlotFlagPart): that tensor's shape.
  std::optional<std::vector<int64_t>> part_of;
  // Not OK: this rank will not take part in the collective, for this
  // reason (Client::Refuse); Submit tells kolod so and returns it.
  absl::Status refused;
};

// Whether `spec`'s tensors are in GPU memory (the output counts for the
// kinds that write a caller-given output on the device).
bool OnDevice(const SubmitSpec& spec);

// Kinds whose device form writes a caller-given output sized unlike the
// input (allgather, reducescatter).
bool DeviceOutputKind(CollectiveKind kind);

// A broadcast's root must be a rank of the job of `size` ranks.
absl::Status CheckRootRank(const SubmitSpec& spec, int size);

// Names, shapes, dtypes, reductions and devices of `spec`.
absl::Status CheckSpec(const SubmitSpec& spec);

}  // namespace kolo
