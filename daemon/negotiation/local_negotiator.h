// LocalNegotiator: the negotiator of a job whose ranks all attach to this
// daemon. A name ready here is ready everywhere, so it plans on the calling
// thread: the thread whose submission made a name ready drains the queue of
// ready names (fusing whatever became ready meanwhile) and runs the steps
// on the executor until the queue is empty; another thread arriving while
// one drains only queues its names. The job's process sets are numbered
// here, in plan order, and the job's device communicator is planned here
// when its first device response comes (one NCCL rank per GPU used).
//
// Thread-safety: thread-safe; mu_ guards the queue.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/negotiation/negotiator.h"

namespace kolo::daemon {

struct LocalNegotiatorOptions {
  std::string job_id;
  int size = 0;
  uint64_t fusion_threshold_bytes = uint64_t{64} << 20;
  // Autotuning: the tuner moves the threshold within [0, this bound].
  plan::AutotuneSettings autotune;
  uint64_t fusion_threshold_bound = uint64_t{64} << 20;
  Backend* host_backend = nullptr;  // the shared-memory CPU backend
  // Makes the NCCL unique id of the job's device communicator; unset: the
  // executor refuses device tensors.
  std::function<absl::StatusOr<std::string>()> new_device_comm_id;
};

class LocalNegotiator final : public Negotiator {
 public:
  // `runner` must outlive the negotiator.
  LocalNegotiator(LocalNegotiatorOptions options, StepRunner* runner);

  absl::Status Start(std::vector<int> local_ranks) override;
  void LocallyReady(ReadySet set) override;
  void Progress() override;
  bool Waiting(int, const std::string&) override { return false; }
  std::vector<WaitingName> WaitingNames() override { return {}; }
  void Abort(const absl::Status& why) override;
  bool joins_with_process_sets() const override { return true; }
  bool has_peers() const override { return false; }
  bool takes_caller_memory() const override { return true; }
  absl::StatusOr<plan::TunerReport> Autotune(uint32_t since) const override;

 private:
  // Plans `batch` (in ready order) into steps; draining thread only.
  std::vector<PlannedStep> Plan(std::vector<ReadySet> batch);
  PlannedStep ControlStep(ReadySet set);
  void AddFused(std::vector<ReadySet> agreed, std::vector<PlannedStep>* steps);
  void PlanDeviceComm(PlannedStep& step);

  const LocalNegotiatorOptions options_;
  StepRunner* const runner_;
  // Set when the job autotunes; fed by the draining thread.
  const std::unique_ptr<plan::FusionTuner> tuner_;

  absl::Mutex mu_;
  std::vector<ReadySet> ready_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);

  // Draining thread only.
  uint64_t sequence_ = 0;
  int next_set_id_ = 1;
  bool device_comm_planned_ = false;
  absl::Status device_comm_error_;
};

}  // namespace kolo::daemon
