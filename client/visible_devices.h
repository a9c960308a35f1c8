// VisibleDevices: the CUDA ordinals a client sees, in kolod's numbering.
//
// A training process is often started with CUDA_VISIBLE_DEVICES=N (one GPU
// per process), so its device 0 is the node's GPU N, while kolod, which
// drives every GPU of the node, numbers them all. The SDK tells kolod where a
// tensor lives in kolod's numbering: a numeric CUDA_VISIBLE_DEVICES list maps
// the client's ordinal i to the list's i-th entry; without the variable the
// numbers are the same. GPUs named by UUID ("GPU-...", "MIG-...") cannot be
// mapped without asking the driver for every GPU, which the client cannot
// see: such lists are refused with a message saying what to do.
//
// Thread-safety: immutable after Parse.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kolo::client {

class VisibleDevices {
 public:
  // `cuda_visible_devices`: the variable's value, or nullopt when unset.
  static VisibleDevices Parse(std::optional<std::string> cuda_visible_devices);

  // Kolod's ordinal of the client's CUDA device `ordinal`.
  absl::StatusOr<int> NodeOrdinal(int ordinal) const;

 private:
  std::optional<std::vector<int>> map_;  // nullopt: identity
  absl::Status unusable_;                // why the list cannot be mapped
  std::string value_;
};

}  // namespace kolo::client
