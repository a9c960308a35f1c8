// ClientImpl: what a Client is made of — its session with kolod (Session),
// the segment's rings, arena and requests in flight (SubmissionQueue), the
// sender of large tensors in parts (PartSender) and the names and process
// sets (Naming) — and the one Submit every collective goes through.
//
// Thread-safety: thread-safe; it holds no lock of its own. Each part says
// what its mutex guards; where two are held at once the order is: the
// queue's submit_mu_ alone; the queue's completion_mu_, then the part
// sender's mu_ or the arena's mu. Session's close_mu_ and Naming's mu_ are
// taken with no other lock held.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/autotune_log.h"
#include "client/naming.h"
#include "client/part_sender.h"
#include "client/session.h"
#include "client/session_arena.h"
#include "client/submission_queue.h"
#include "client/submit_spec.h"
#include "kolo/kolo.h"

namespace kolo {

class ClientImpl {
 public:
  static absl::StatusOr<std::unique_ptr<ClientImpl>> Connect(const ClientOptions& options);
  ~ClientImpl();

  const ClientOptions& options() const { return session_.options(); }
  const std::string& session_id() const { return session_.session_id(); }
  uint64_t epoch() const { return session_.epoch(); }
  bool caller_memory() const { return session_.caller_memory(); }
  absl::StatusOr<Client::ElasticStatus> GetElasticStatus() const {
    return session_.GetElasticStatus();
  }
  // Ends the session now (the destructor does it otherwise): detaches,
  // telling kolod whether the rank `rejoin`s the next epoch of an elastic
  // job, waits for the stream to end and stops the part pump. Later calls
  // fail. Idempotent.
  void Close(bool rejoin);

  // The one submission path: refusals (spec.refused), checks, tensors in
  // parts and whole requests alike. A spec this rank refuses is refused on
  // every rank (SubmissionQueue::Refuse).
  absl::StatusOr<Handle> Submit(const SubmitSpec& spec);
  // Submits `specs` as one group (same group id on every rank), each
  // through Submit.
  absl::StatusOr<std::vector<Handle>> SubmitGroup(std::vector<SubmitSpec> specs);
  // Control collectives (no tensor), through Submit.
  absl::Status Barrier(int process_set);
  absl::StatusOr<int> Join();
  absl::StatusOr<int> AddProcessSet(std::vector<int> ranks);
  absl::Status RemoveProcessSet(int process_set);

  absl::StatusOr<int> ProcessSetRank(int process_set) const {
    return names_.ProcessSetRank(process_set, options().rank);
  }
  absl::StatusOr<int> ProcessSetSize(int process_set) const {
    return names_.ProcessSetSize(process_set);
  }

  absl::StatusOr<HostBuffer> Allocate(DType dtype, std::vector<int64_t> shape) {
    return queue_.Allocate(dtype, std::move(shape));
  }
  absl::Status WaitFor(Handle handle, absl::Duration timeout) {
    return queue_.WaitFor(handle, timeout);
  }
  absl::StatusOr<HostBuffer> WaitForOutput(Handle handle) {
    return queue_.WaitForOutput(handle, names_);
  }
  absl::StatusOr<AlltoallResult> WaitForAlltoall(Handle handle) {
    return queue_.WaitForAlltoall(handle, names_);
  }
  // True once complete, waiting at most `timeout` for it.
  absl::StatusOr<bool> Test(Handle handle, absl::Duration timeout) {
    return queue_.Test(handle, timeout);
  }
  absl::StatusOr<bool> Underway(Handle handle) { return queue_.Underway(handle); }

  absl::Status StartTimeline(uint64_t max_events) { return session_.StartTimeline(max_events); }
  absl::StatusOr<TimelineTrace> StopTimeline() { return session_.StopTimeline(); }

 private:
  friend HostBuffer MakeHostBuffer(std::shared_ptr<HostBuffer::Arena> arena, void* data,
                                   uint64_t bytes, DType dtype, std::vector<int64_t> shape,
                                   int64_t result_offset);
  // HostBuffer's constructor, which its friend ClientImpl may call.
  static HostBuffer NewHostBuffer(std::shared_ptr<HostBuffer::Arena> arena, void* data,
                                  uint64_t bytes, DType dtype, std::vector<int64_t> shape,
                                  int64_t result_offset) {
    return HostBuffer(std::move(arena), data, bytes, dtype, std::move(shape), result_offset);
  }

  explicit ClientImpl(const ClientOptions& options)
      : session_(options), queue_(&session_, &sender_), sender_(&session_, &queue_) {}
  // Submits a control collective (no tensor) and returns its value.
  absl::StatusOr<int64_t> RunControl(CollectiveKind kind, const std::string& name, int process_set,
                                     std::vector<int64_t> aux);

  // Declared in the order each needs the ones before it (destroyed in
  // reverse: the pump stops before the queue it sends through goes).
  Session session_;
  // Rank 0 of a job that autotunes with a log (HOROVOD_AUTOTUNE_LOG).
  std::unique_ptr<AutotuneLog> autotune_log_;
  SubmissionQueue queue_;
  PartSender sender_;
  Naming names_;
};

}  // namespace kolo
