// Reads one job's fusion counters from kolod's Status service (kolo.v1.Status
// GetStatus, on the daemon's Unix socket), so a benchmark can say how many
// tensors each fused response carried.
//
// Thread-safety: a JobCountersReader may be used from several threads (gRPC
// stubs are); JobCounters is a plain value.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/kolo/v1/status.grpc.pb.h"

namespace kolo::bench {

// Cumulative over the job's lifetime.
struct JobCounters {
  uint64_t responses = 0;               // fused responses executed
  uint64_t fused_tensors = 0;           // tensors in them
  uint64_t fusion_threshold_bytes = 0;  // the node's setting
};

// The counters' growth between two readings, with `single_tensor_extras`
// one-member responses (barriers) taken out: what the tensors in between
// were fused into.
struct FusionDelta {
  uint64_t responses = 0;
  uint64_t tensors = 0;
  double tensors_per_response() const {
    return responses == 0 ? 0.0 : static_cast<double>(tensors) / static_cast<double>(responses);
  }
};
// `expected_tensors` is how many tensors the measured work submitted; any
// further members counted are taken as one-member responses (a barrier's)
// and removed from both counts. Returns what remains.
FusionDelta FusionBetween(const JobCounters& before, const JobCounters& after,
                          uint64_t expected_tensors);

class JobCountersReader {
 public:
  // Connects to the daemon on `socket_path` (a Unix socket), waiting at most
  // `timeout`, and takes an identity ticket from its handoff socket: kolod
  // shows a caller only the jobs of its own uid.
  static absl::StatusOr<JobCountersReader> Connect(const std::string& socket_path,
                                                   absl::Duration timeout);

  // The job's counters; NOT_FOUND when the daemon has no job `job_id`.
  absl::StatusOr<JobCounters> Read(const std::string& job_id) const;

 private:
  JobCountersReader(std::unique_ptr<kolo::v1::Status::Stub> stub, std::string identity_ticket)
      : stub_(std::move(stub)), identity_ticket_(std::move(identity_ticket)) {}
  std::unique_ptr<kolo::v1::Status::Stub> stub_;
  std::string identity_ticket_;
};

}  // namespace kolo::bench
