// The types every layer of kolod's request path shares: Request (one rank's
// validated collective request), Completion (its outcome), ReadySet (every
// required rank's request for one name), RequestOrigin (the narrow view of
// the session a request came from) and RequestSink (where sessions hand
// requests). daemon/core depends on nothing else in daemon/.
//
// Thread-safety: Request, Completion and ReadySet are plain data, not
// synchronised; RequestOrigin and RequestSink implementations are
// thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "absl/time/time.h"
#include "common/cuda/device_tensor.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {

class CallerMemory;
struct Completion;

// What the layers below the session may do with the session a request came
// from: name it, complete its requests, and place results in its arena. A
// backend or the executor reaches the session only through this.
class RequestOrigin {
 public:
  virtual ~RequestOrigin() = default;
  // The session's id (logs, per-session device handle caches).
  virtual const std::string& origin_id() const = 0;
  // Writes completions and rings the client's doorbell once.
  virtual void Complete(absl::Span<const Completion> completions) = 0;
  // Places `bytes` in the session's result area; returns the arena offset.
  // RESOURCE_EXHAUSTED when the area is full.
  virtual absl::StatusOr<uint64_t> AllocateResult(uint64_t bytes) = 0;
  // Frees a result; offsets not handed out are ignored.
  virtual void ReleaseResult(uint64_t arena_offset) = 0;
  // The daemon's mapping of the session's arena.
  virtual uint8_t* arena_base() const = 0;
};

struct Request {
  uint64_t request_id = 0;  // the client's, echoed in its completion
  int rank = -1;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root_rank = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;
  std::string name;
  uint64_t bytes = 0;
  int process_set = 0;
  Compression compression = Compression::kNone;
  uint64_t group_id = 0;
  uint32_t group_size = 0;  // > 1: negotiated with its group as one unit
  // Alltoall: rows sent to each member of the process set (empty: even
  // split). add_process_set: the set's global ranks.
  std::vector<int64_t> aux;
  // Resolved into the daemon's mapping of the submitting session's arena;
  // valid while `origin` is held. Null for a device request.
  const uint8_t* input = nullptr;
  uint8_t* output = nullptr;
  // Caller memory (abi kSlotFlagCallerMemory): the tensors are at these
  // addresses in the rank's own process, reached through `caller` (input
  // and output are null). Host allreduce and broadcast of one-node jobs.
  std::shared_ptr<const CallerMemory> caller;
  uint64_t caller_input = 0;
  uint64_t caller_output = 0;
  // A device request: its tensors are in GPU memory, named by CUDA IPC
  // handles (plain data; no CUDA header needed). Its response runs on the
  // job's device backend.
  std::optional<cuda::DeviceIo> device;
  // The session it came from; held while the request is.
  std::shared_ptr<RequestOrigin> origin;
  absl::Time submitted_at;
  // Set for a refusal (abi kSlotFlagRefusal): the rank will not take part,
  // for this reason; the name's collective fails on every rank with it.
  std::optional<std::string> refusal;
};

// Bytes of one row of `r`'s tensor (everything but the first dimension).
inline uint64_t RowBytes(const Request& r) {
  uint64_t row = DTypeSize(r.dtype);
  for (size_t d = 1; d < r.shape.size(); ++d) row *= static_cast<uint64_t>(r.shape[d]);
  return row;
}

// The outcome of one request, as written to its session's completion ring.
struct Completion {
  uint64_t request_id;
  absl::Status status;
  uint64_t result_offset = 0;  // arena offsets of a result tensor
  uint64_t result_bytes = 0;
  int64_t value = 0;
};

// The submitted requests for one name, in ascending rank order.
struct ReadySet {
  std::string name;
  int process_set = 0;
  std::vector<Request> requests;
  // OK, or the mismatch to deliver to every rank.
  absl::Status agreement;
  absl::Time first_submitted;  // when the first rank submitted it
  absl::Time ready_at;         // when it became ready
  // Filled by the job: members of the process set, and how many of them
  // had joined (they contribute zeros to an allreduce).
  int set_size = 0;
  int joined = 0;
};

// Where a session's ingress hands its validated requests: the session's job.
//
// Thread-safety: implementations are thread-safe.
class IngressGroup;

class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual int size() const = 0;  // ranks in the job
  // Takes one validated request of an attached rank and acts on it: plans
  // and runs what became ready (Accept, then Progress).
  virtual void Submit(Request request) = 0;
  // Takes a request without acting on it yet; the caller calls Progress
  // after a batch, so names that became ready together are fused.
  virtual void Accept(Request request) { Submit(std::move(request)); }
  virtual void Progress() {}
  // Where the job's sessions on this node share their polling; null: each
  // session polls alone. Lives as long as the sink.
  virtual IngressGroup* ingress_group() { return nullptr; }
};

}  // namespace kolo::daemon
