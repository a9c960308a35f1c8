// How a job's coordinator plans: the fusion threshold, how many names it
// caches, and how it makes the job's NCCL unique id; and the key of a
// tensor name within its process set, which every part of the coordinator
// and the members use.
//
// Thread-safety: plain values and a pure function.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "daemon/plan/job_settings.h"
#include "proto/kolo/v1/job_settings.pb.h"

namespace kolo::daemon {

// The key of a tensor name within its process set (names are per set).
inline std::string PeerKey(int process_set, const std::string& name) {
  return absl::StrCat(process_set, ":", name);
}

// The most nodes a job negotiates in direct rounds with (each node's round
// goes to every other node; beyond this the coordinator plans everything).
inline constexpr int kMaxDirectNodes = 32;

struct CoordinatorOptions {
  uint64_t fusion_threshold_bytes = uint64_t{64} << 20;
  uint32_t cache_capacity = 1024;
  // Cached names negotiate in direct rounds between the nodes (see
  // daemon/negotiation/ready_rounds.h) when the job has a data-plane key
  // and does not autotune (the tuner learns from the plans made here).
  bool direct_ready = true;
  // The job's settings as its ranks asked for them: every node's Hello must
  // carry the same. With autotuning on, the fusion threshold above is where
  // the tuner starts.
  kolo::v1::JobSettings asked_settings;
  plan::AutotuneSettings autotune;
  // Makes the NCCL unique id of the job's device communicator (this
  // daemon's DeviceBackendFactory::NewCommId); unset: device tensors fail.
  std::function<absl::StatusOr<std::string>()> new_device_comm_id;
};

}  // namespace kolo::daemon
