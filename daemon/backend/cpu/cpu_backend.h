// CpuBackend: collectives over host tensors of one node, straight between the
// ranks' shared-memory arenas that kolod maps. An allreduce reads every
// rank's input once and writes every rank's output once, in a single pass
// split into chunks across the worker pool; nothing is staged, which is why
// fusion here groups work (one parallel step and one doorbell per rank for
// many tensors) rather than copying into a fusion buffer. Allgather,
// reducescatter and alltoall write each rank's new output into that rank's
// result area.
//
// Thread-safety: thread-compatible; Execute may run concurrently for
// different jobs (the pool serialises its own use).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "daemon/backend/backend.h"
#include "daemon/backend/cpu/worker_pool.h"

namespace kolo::daemon {

class CpuBackend : public Backend {
 public:
  // `pool` must outlive the backend. Responses smaller than
  // `parallel_threshold_bytes` run on the calling thread alone.
  CpuBackend(WorkerPool* pool, uint64_t parallel_threshold_bytes = 256 << 10,
             uint64_t chunk_bytes = 1 << 20)
      : pool_(pool), parallel_threshold_(parallel_threshold_bytes), chunk_bytes_(chunk_bytes) {}

  absl::string_view name() const override { return "cpu"; }
  absl::Status Execute(Response& response, const StepContext& step) override;

 private:
  // One piece of work: returns its status.
  using Task = std::function<absl::Status()>;

  void PlanAllreduce(const Response& r, FusedMember& m, std::vector<Task>* tasks);
  void PlanBroadcast(const Response& r, FusedMember& m, std::vector<Task>* tasks);
  // New tensors go where `results` puts them.
  absl::Status PlanAllgather(FusedMember& m, ResultAllocator* results, std::vector<Task>* tasks);
  absl::Status PlanReducescatter(const Response& r, FusedMember& m, ResultAllocator* results,
                                 std::vector<Task>* tasks);
  absl::Status PlanAlltoall(FusedMember& m, ResultAllocator* results, std::vector<Task>* tasks);

  WorkerPool* pool_;
  uint64_t parallel_threshold_;
  uint64_t chunk_bytes_;
};

}  // namespace kolo::daemon
