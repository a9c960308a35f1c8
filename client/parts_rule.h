// Which tensors a client sends in parts (client_parts.cc has the sending).
// Every rank must split alike, so the rule reads only what the ranks agree
// on and what their one kolod says, never where a rank's tensor lies.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/kolo/abi/types.h"

namespace kolo {

inline constexpr uint64_t kPartsMinBytes = uint64_t{4} << 20;
inline constexpr uint64_t kPartBytes = uint64_t{1} << 20;
inline constexpr uint64_t kPartsInFlight = 4;
// Room a part's name needs beyond the tensor's: the separator and up to 20
// digits.
inline constexpr size_t kPartSuffixBytes = 21;

struct PartsQuestion {
  CollectiveKind kind = CollectiveKind::kAllreduce;
  uint64_t bytes = 0;
  size_t name_bytes = 0;
  bool on_device = false;
  bool grouped = false;       // a member of a grouped collective
  bool one_node = false;      // every rank of the job on this node
  bool daemon_takes = false;  // kolod said so at attach (AttachResponse)
  bool has_buffers = false;   // input and output given
};

// Host allreduce and broadcast tensors of kPartsMinBytes and more, of a
// one-node job whose kolod takes parts, whose name leaves room for a part's.
bool GoesInParts(const PartsQuestion& q);

}  // namespace kolo
