// The coordinator's planner: turns the globally ready names, in the order
// they became ready, into one plan every member runs alike:
//   1. the fusable names (agreed, neither a join nor a set change) are
//      grouped once by the shared rule (daemon/plan/fusion.h), keeping
//      apart names that different sets of fully joined nodes take part in;
//   2. responses are added in the order of their first name: a failed
//      name, a set change (applied now, in plan order), a join, or a
//      fused group;
//   3. the first device response carries the job's device communicator.
// Names it plans for the first time get cache ids. The coordinator numbers
// the plan and sends it.
//
// Thread-safety: not thread-safe; the coordinator's lock guards it.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/coordinator/coordinator_options.h"
#include "daemon/coordinator/membership.h"
#include "daemon/coordinator/readiness.h"
#include "daemon/coordinator/response_cache.h"
#include "daemon/plan/fusion_tuner.h"
#include "daemon/plan/process_set_registry.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon {

class Planner {
 public:
  // Everything but `options` is the coordinator's and outlives this.
  Planner(std::string job_id, int size, const CoordinatorOptions& options,
          const Membership& members, plan::ProcessSetRegistry& sets, ResponseCache& cache,
          Readiness& readiness)
      : job_id_(std::move(job_id)),
        size_(size),
        options_(options),
        fusion_threshold_(options.fusion_threshold_bytes),
        members_(members),
        sets_(sets),
        cache_(cache),
        readiness_(readiness) {}

  // The plan of `ready` (not empty), without its sequence number.
  kolo::v1::Plan Plan(const std::vector<ReadyName>& ready);
  // Fuses up to `threshold` bytes from now on; with a `tuner` (owned by the
  // coordinator, outliving this), up to its threshold, telling it each
  // planned name.
  void UseFusion(uint64_t threshold, plan::FusionTuner* tuner) {
    fusion_threshold_ = threshold;
    tuner_ = tuner;
  }

 private:
  // Adds a response to `plan` that fails `meta`'s name with `error`.
  static void AddErrorResponse(const kolo::v1::TensorMeta& meta, const absl::Status& error,
                               kolo::v1::Plan* plan);
  // Applies the agreed set change `meta` and adds its response (or its
  // failure) to `plan`.
  void AddSetChange(const kolo::v1::TensorMeta& meta, kolo::v1::Plan* plan);
  static void AddJoinResponse(const kolo::v1::TensorMeta& meta, kolo::v1::Plan* plan);
  // Adds one response for `names` (indices into `ready`, one fusion group
  // laid out as daemon/plan/fusion.h says) to `plan`.
  kolo::v1::PlannedResponse* AddFusedResponse(const std::vector<ReadyName>& ready,
                                              const std::vector<size_t>& names,
                                              kolo::v1::Plan* plan);
  // Names `meta` in `response` by cache id, or by name (assigning it a
  // cache id in `plan` where it may have one).
  void AddMember(const kolo::v1::TensorMeta& meta, kolo::v1::PlannedResponse* response,
                 kolo::v1::Plan* plan);
  // Gives the first of `device_responses` (in plan order) the job's device
  // communicator the first time there is one, or fails them all if it
  // could not be made.
  void AttachDeviceComm(const std::vector<kolo::v1::PlannedResponse*>& device_responses);
  // Applies an agreed add or remove of a process set (in plan order; a
  // removed set's waiting names fail in `plan`). Returns the new set's id
  // for an add, 0 for a remove, or why it cannot be applied.
  absl::StatusOr<int> ChangeSet(const kolo::v1::TensorMeta& meta, kolo::v1::Plan* plan);
  // The job's device communicator, from every node's DeviceLayout.
  absl::StatusOr<kolo::v1::DeviceComm> MakeDeviceComm() const;

  const std::string job_id_;
  const int size_;
  const CoordinatorOptions options_;
  uint64_t fusion_threshold_;
  plan::FusionTuner* tuner_ = nullptr;
  const Membership& members_;
  plan::ProcessSetRegistry& sets_;
  ResponseCache& cache_;
  Readiness& readiness_;
  // The device communicator goes out once, on the first device response;
  // if it could not be made, every device response fails with why.
  bool device_comm_planned_ = false;
  absl::Status device_comm_error_;
};

}  // namespace kolo::daemon
