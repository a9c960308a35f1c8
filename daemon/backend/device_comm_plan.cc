#include "daemon/backend/device_comm_plan.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"

namespace kolo::daemon {

absl::StatusOr<DeviceCommPlan> MakeDeviceCommPlan(int job_size,
                                                  const std::vector<RankDevices>& nodes,
                                                  std::string unique_id) {
  if (job_size < 1 || job_size > kMaxNcclRanks) {
    return absl::InvalidArgumentError(absl::StrCat("job size ", job_size, " out of range"));
  }
  DeviceCommPlan plan;
  plan.unique_id = std::move(unique_id);
  plan.nccl_rank.assign(job_size, -1);
  plan.device.assign(job_size, -1);
  for (size_t n = 0; n < nodes.size(); ++n) {
    std::map<int, int> lane_of_device;  // ordered: NCCL ranks by CUDA ordinal
    for (const auto& [rank, device] : nodes[n]) {
      if (rank < 0 || rank >= job_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("node ", n, " places rank ", rank, ", outside [0, ", job_size, ")"));
      }
      if (device < 0 || device >= kMaxDeviceOrdinalInPlan) {
        return absl::InvalidArgumentError(absl::StrCat("node ", n, " places rank ", rank,
                                                       " on CUDA device ", device, ", outside [0, ",
                                                       kMaxDeviceOrdinalInPlan, ")"));
      }
      if (plan.device[rank] != -1) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", rank, " is placed twice (again by node ", n, ")"));
      }
      plan.device[rank] = device;
      lane_of_device.emplace(device, 0);
    }
    if (static_cast<int>(lane_of_device.size()) > kMaxLanesPerNode) {
      return absl::InvalidArgumentError(absl::StrCat("node ", n, " uses ", lane_of_device.size(),
                                                     " GPUs for one job (at most ",
                                                     kMaxLanesPerNode, ")"));
    }
    for (auto& [device, nccl_rank] : lane_of_device) nccl_rank = plan.nranks++;
    for (const auto& [rank, device] : nodes[n]) plan.nccl_rank[rank] = lane_of_device[device];
  }
  if (plan.nranks == 0) {
    return absl::InvalidArgumentError("no rank of the job has a device tensor");
  }
  return plan;
}

absl::Status ValidateDeviceCommPlan(const DeviceCommPlan& plan, int job_size) {
  if (static_cast<int>(plan.nccl_rank.size()) != job_size ||
      static_cast<int>(plan.device.size()) != job_size) {
    return absl::InvalidArgumentError(absl::StrCat("device communicator plan covers ",
                                                   plan.nccl_rank.size(), " / ", plan.device.size(),
                                                   " ranks; the job has ", job_size));
  }
  if (plan.nranks < 1 || plan.nranks > kMaxNcclRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("device communicator plan has ", plan.nranks, " NCCL ranks"));
  }
  std::vector<int> device_of(plan.nranks, -1);
  for (int r = 0; r < job_size; ++r) {
    const int n = plan.nccl_rank[r];
    const int d = plan.device[r];
    if ((n == -1) != (d == -1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("device communicator plan: rank ", r, " is half placed"));
    }
    if (n == -1) continue;
    if (n < 0 || n >= plan.nranks || d < 0 || d >= kMaxDeviceOrdinalInPlan) {
      return absl::InvalidArgumentError(absl::StrCat("device communicator plan: rank ", r,
                                                     " on NCCL rank ", n, ", CUDA device ", d,
                                                     " is out of range"));
    }
    if (device_of[n] != -1 && device_of[n] != d) {
      return absl::InvalidArgumentError(absl::StrCat("device communicator plan: NCCL rank ", n,
                                                     " is on CUDA devices ", device_of[n], " and ",
                                                     d));
    }
    device_of[n] = d;
  }
  for (int n = 0; n < plan.nranks; ++n) {
    if (device_of[n] == -1) {
      // Nobody would join as this rank: NCCL would wait for it.
      return absl::InvalidArgumentError(
          absl::StrCat("device communicator plan: NCCL rank ", n, " hosts no rank"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DeviceLane>> LocalLanes(const DeviceCommPlan& plan,
                                                   const std::vector<int>& local_ranks) {
  std::map<int, DeviceLane> by_nccl_rank;
  for (int r : local_ranks) {
    if (r < 0 || r >= static_cast<int>(plan.nccl_rank.size()) || plan.nccl_rank[r] < 0) continue;
    DeviceLane& lane = by_nccl_rank[plan.nccl_rank[r]];
    lane.nccl_rank = plan.nccl_rank[r];
    lane.device = plan.device[r];
    lane.ranks.push_back(r);
  }
  std::vector<DeviceLane> lanes;
  std::map<int, int> nccl_rank_of_device;
  for (auto& [n, lane] : by_nccl_rank) {
    auto [it, inserted] = nccl_rank_of_device.emplace(lane.device, n);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CUDA device ", lane.device, " of this node holds NCCL ranks ", it->second, " and ", n));
    }
    std::sort(lane.ranks.begin(), lane.ranks.end());
    lanes.push_back(std::move(lane));
  }
  return lanes;
}

}  // namespace kolo::daemon
