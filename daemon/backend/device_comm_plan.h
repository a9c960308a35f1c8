// DeviceCommPlan: how a job's ranks map onto the NCCL communicator that
// carries its device tensors. There is one NCCL rank per (node, GPU) the job
// uses: a daemon drives every GPU of its node that the job's ranks use, one
// NCCL rank each, and reduces the ranks that share a GPU on that GPU first.
// NCCL ranks are numbered node by node (in the coordinator's node order)
// and by CUDA ordinal within a node.
//
// The plan is made once per job: by the job itself on one node, and by the
// coordinator across nodes (it collects every node's rank -> GPU pairs and
// sends the plan with the unique id in the Peer protocol), so every daemon
// derives the same communicator from the same plan.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kolo::daemon {

// The most GPUs one daemon drives for one job, and the largest CUDA ordinal.
inline constexpr int kMaxLanesPerNode = 64;
inline constexpr int kMaxDeviceOrdinalInPlan = 1024;
// The largest communicator a plan may describe.
inline constexpr int kMaxNcclRanks = 1 << 16;

struct DeviceCommPlan {
  std::string unique_id;       // an ncclUniqueId's bytes
  int nranks = 0;              // NCCL ranks: GPUs of the job on every node
  std::vector<int> nccl_rank;  // by global rank; -1: no device tensor seen
  std::vector<int> device;     // by global rank: CUDA ordinal on its node, or -1
};

// One node's ranks and the CUDA ordinal each one's device tensors live on.
using RankDevices = std::vector<std::pair<int, int>>;

// The plan of a job of `job_size` ranks whose nodes (in node order) use the
// GPUs in `nodes`. INVALID_ARGUMENT names the rank or node at fault: a rank
// outside the job or listed twice, an ordinal out of range.
absl::StatusOr<DeviceCommPlan> MakeDeviceCommPlan(int job_size,
                                                  const std::vector<RankDevices>& nodes,
                                                  std::string unique_id);

// Checks a plan received from another daemon for a job of `job_size` ranks:
// vector sizes, rank and ordinal ranges, one ordinal per NCCL rank.
absl::Status ValidateDeviceCommPlan(const DeviceCommPlan& plan, int job_size);

// One GPU this daemon drives for the job: its NCCL rank, CUDA ordinal and
// the (global) ranks of this node whose tensors live on it, ascending.
struct DeviceLane {
  int nccl_rank = 0;
  int device = 0;
  std::vector<int> ranks;
};

// The lanes of the daemon hosting `local_ranks`, by NCCL rank. Ranks the
// plan does not place are left out. Two NCCL ranks on one GPU of this node
// are INVALID_ARGUMENT (NCCL refuses a communicator with a GPU twice).
absl::StatusOr<std::vector<DeviceLane>> LocalLanes(const DeviceCommPlan& plan,
                                                   const std::vector<int>& local_ranks);

}  // namespace kolo::daemon
