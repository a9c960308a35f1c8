#include "daemon/negotiation/local_negotiator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon {
namespace {

// A step whose members are `set` alone, as planned (no fusion).
Response Single(ReadySet set) {
  std::vector<ReadySet> one;
  one.push_back(std::move(set));
  std::vector<Response> r = PlanFusion(std::move(one), UINT64_MAX);
  return std::move(r.front());
}

}  // namespace

LocalNegotiator::LocalNegotiator(LocalNegotiatorOptions options, StepRunner* runner)
    : options_(std::move(options)),
      runner_(runner),
      tuner_(options_.autotune.enabled ? std::make_unique<plan::FusionTuner>(
                                             options_.autotune, options_.fusion_threshold_bytes,
                                             options_.fusion_threshold_bound)
                                       : nullptr) {}

absl::StatusOr<plan::TunerReport> LocalNegotiator::Autotune(uint32_t since) const {
  if (tuner_ == nullptr) return Negotiator::Autotune(since);
  return tuner_->Report(since);
}

absl::Status LocalNegotiator::Start(std::vector<int> /*local_ranks*/) { return absl::OkStatus(); }

void LocalNegotiator::LocallyReady(ReadySet set) {
  absl::MutexLock l(&mu_);
  ready_.push_back(std::move(set));
}

void LocalNegotiator::Progress() {
  std::vector<ReadySet> batch;
  absl::Status aborted;
  {
    absl::MutexLock l(&mu_);
    if (draining_ || ready_.empty()) return;
    draining_ = true;
    batch.swap(ready_);
    aborted = aborted_;
  }
  for (;;) {
    if (!aborted.ok()) {
      runner_->Fail(std::move(batch), aborted);
    } else {
      for (PlannedStep& step : Plan(std::move(batch))) runner_->Run(std::move(step));
    }
    batch.clear();
    absl::MutexLock l(&mu_);
    if (ready_.empty()) {
      draining_ = false;
      return;
    }
    batch.swap(ready_);
    aborted = aborted_;
  }
}

void LocalNegotiator::Abort(const absl::Status& why) {
  std::vector<ReadySet> left;
  {
    absl::MutexLock l(&mu_);
    if (aborted_.ok()) aborted_ = why;
    if (draining_) return;  // the draining thread fails what is queued
    left.swap(ready_);
  }
  runner_->Fail(std::move(left), why);
}

std::vector<PlannedStep> LocalNegotiator::Plan(std::vector<ReadySet> batch) {
  std::vector<PlannedStep> steps;
  std::vector<ReadySet> agreed;
  for (ReadySet& set : batch) {
    const CollectiveKind kind = set.requests.front().kind;
    if (IsControl(kind)) {
      // Control steps keep their place: what became ready before runs first.
      AddFused(std::move(agreed), &steps);
      agreed.clear();
      steps.push_back(ControlStep(std::move(set)));
      continue;
    }
    if (set.agreement.ok()) {
      agreed.push_back(std::move(set));
      continue;
    }
    PlannedStep refused;
    refused.error = set.agreement;
    refused.response = Single(std::move(set));
    refused.context.sequence = sequence_++;
    steps.push_back(std::move(refused));
  }
  AddFused(std::move(agreed), &steps);
  return steps;
}

PlannedStep LocalNegotiator::ControlStep(ReadySet set) {
  PlannedStep step;
  const Request& first = set.requests.front();
  step.context.sequence = sequence_++;
  step.error = set.agreement;
  if (first.kind == CollectiveKind::kJoin) {
    step.kind = PlannedStep::Kind::kJoinDone;
    step.last_joined = first.aux.empty() ? -1 : static_cast<int>(first.aux.front());
  } else {
    step.kind = PlannedStep::Kind::kProcessSetChange;
    if (step.error.ok() && first.kind == CollectiveKind::kAddProcessSet) {
      step.new_process_set = next_set_id_++;
    }
  }
  step.response = Single(std::move(set));
  return step;
}

void LocalNegotiator::AddFused(std::vector<ReadySet> agreed, std::vector<PlannedStep>* steps) {
  if (agreed.empty()) return;
  const uint64_t threshold =
      tuner_ != nullptr ? tuner_->threshold() : options_.fusion_threshold_bytes;
  const absl::Time now = tuner_ != nullptr ? absl::Now() : absl::InfinitePast();
  for (Response& response : PlanFusion(std::move(agreed), threshold)) {
    if (tuner_ != nullptr) {
      for (size_t m = 0; m < response.members.size(); ++m) {
        tuner_->Planned(response.members[m].set.name, m == 0 ? response.total_bytes : 0, now);
      }
    }
    PlannedStep step;
    step.response = std::move(response);
    step.host_backend = options_.host_backend;
    step.context.sequence = sequence_++;
    if (step.response.on_device) PlanDeviceComm(step);
    steps->push_back(std::move(step));
  }
}

void LocalNegotiator::PlanDeviceComm(PlannedStep& step) {
  if (device_comm_planned_ || !options_.new_device_comm_id) {
    step.error = device_comm_error_;
    return;
  }
  device_comm_planned_ = true;
  // The job's first device response places each rank on the GPU of its
  // tensor, and every GPU used becomes an NCCL rank of a communicator this
  // daemon alone drives.
  RankDevices placed;
  for (const Request& r : step.response.members.front().set.requests) {
    if (r.device.has_value()) placed.emplace_back(r.rank, r.device->input.device);
  }
  absl::StatusOr<std::string> id = options_.new_device_comm_id();
  absl::StatusOr<DeviceCommPlan> comm =
      id.ok() ? MakeDeviceCommPlan(options_.size, {placed}, *std::move(id))
              : absl::StatusOr<DeviceCommPlan>(id.status());
  if (!comm.ok()) {
    device_comm_error_ = absl::Status(
        comm.status().code(),
        absl::StrCat("job ", options_.job_id, ": no NCCL communicator: ", comm.status().message()));
    step.error = device_comm_error_;
    return;
  }
  step.device_comm = *std::move(comm);
  for (int r = 0; r < options_.size; ++r) step.local_ranks.push_back(r);
}

}  // namespace kolo::daemon
