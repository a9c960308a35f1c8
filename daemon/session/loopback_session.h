// LoopbackSession: a daemon Session over a segment this test process creates
// itself, standing in for a client so a Job can be driven without libkolo.
// Completions the job delivers land in the segment's completion ring, where
// TakeCompletions reads them as a client would. No ingress thread is started:
// tests hand Requests to the Job directly.
//
// Thread-safety: TakeCompletions from one thread at a time (it is the ring's
// only consumer); the Session itself is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/shared_segment.h"
#include "common/spsc_ring.h"
#include "daemon/session/session.h"

namespace kolo::daemon {

struct ReceivedCompletion {
  uint64_t request_id = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string message;
  uint64_t result_offset = 0;  // a new tensor's place in the session's arena
  uint64_t result_bytes = 0;
  int64_t value = 0;
};

class LoopbackSession {
 public:
  // `result_bytes`: the size of the session's result area (where kolod puts
  // the new tensors of allgather, reducescatter and alltoall).
  static absl::StatusOr<std::unique_ptr<LoopbackSession>> Create(const std::string& job_id,
                                                                 int rank,
                                                                 uint64_t result_bytes = 0);

  const std::shared_ptr<Session>& session() const { return session_; }
  // Every completion written since the last call, oldest first.
  std::vector<ReceivedCompletion> TakeCompletions();

 private:
  LoopbackSession() = default;

  SharedSegment segment_;  // the client's side of the mapping
  SpscRing<abi::v1::CompletionSlot> completions_;
  std::shared_ptr<Session> session_;
};

}  // namespace kolo::daemon
