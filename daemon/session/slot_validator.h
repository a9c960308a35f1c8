// Turns an untrusted submission slot into a Request, or says exactly what is
// wrong with it. Nothing in a slot is trusted: enums, counts, shape, lengths,
// overflow of shape products and every arena range are checked.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "daemon/core/request.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo::daemon {

struct ArenaBounds {
  uint8_t* base = nullptr;
  uint64_t bytes = 0;
  // The session may name host tensors by address in its process
  // (kSlotFlagCallerMemory): kolod proved at attach that it can reach them.
  bool caller_memory = false;
};

// CUDA ordinals a device request may name (a node has far fewer GPUs; the
// device backend checks the ordinal against the GPUs it sees).
inline constexpr int32_t kMaxDeviceOrdinal = 64;

// `slot` is the daemon's private copy. `job_size` bounds root ranks. The
// returned Request has input/output resolved inside `arena` (or, with
// kSlotFlagDevice, `device` set and input/output null; with
// kSlotFlagRefusal, `refusal` set and no tensor; with kSlotFlagCallerMemory,
// caller_input/caller_output set and input/output null); `rank`, `session`
// and `caller` are left for the caller to fill.
absl::StatusOr<Request> ValidateSlot(const abi::v1::SubmitSlot& slot, const ArenaBounds& arena,
                                     int job_size);

}  // namespace kolo::daemon
