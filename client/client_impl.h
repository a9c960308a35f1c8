// ClientImpl: libkolo's session with kolod — the Attach stream, the session's
// shared-memory segment and its rings, the arena allocator and the table of
// requests in flight.
//
// Thread-safety: thread-safe. Submissions are serialised by submit_mu_, the
// completion ring and request tables by completion_mu_; a watcher thread
// reads the Attach stream and marks the session dead when it ends.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/arena_allocator.h"
#include "common/shared_segment.h"
#include "common/spsc_ring.h"
#include "kolo/kolo.h"
#include "proto/kolo/abi/shm_abi_v1.h"
#include "proto/kolo/v1/node.grpc.pb.h"

namespace kolo {

// The session arena as seen by HostBuffer: an allocator over the mapping.
struct HostBuffer::Arena {
  Arena(uint8_t* b, uint64_t bytes) : base(b), size(bytes), alloc(bytes, 64) {}
  uint8_t* const base;
  const uint64_t size;
  absl::Mutex mu;
  ArenaAllocator alloc ABSL_GUARDED_BY(mu);

  bool Contains(const void* p, uint64_t bytes) const {
    auto* b = static_cast<const uint8_t*>(p);
    return b >= base && b <= base + size &&
           bytes <= static_cast<uint64_t>(base + size - b);
  }
};

class ClientImpl {
 public:
  static absl::StatusOr<std::unique_ptr<ClientImpl>> Connect(
      const ClientOptions& options);
  ~ClientImpl();

  const ClientOptions& options() const { return options_; }
  const std::string& session_id() const { return session_id_; }

  absl::StatusOr<HostBuffer> Allocate(DType dtype, std::vector<int64_t> shape);
  absl::StatusOr<Handle> Submit(CollectiveKind kind, const ConstTensorView& input,
                                const TensorView& output, std::string_view name,
                                const AllreduceOptions& options, int root_rank);
  absl::Status WaitFor(Handle handle, absl::Duration timeout);
  absl::StatusOr<bool> Test(Handle handle);

 private:
  // A request whose completion the client still has to act on.
  struct Pending {
    uint64_t input_staging = UINT64_MAX;   // arena offsets we allocated
    uint64_t output_staging = UINT64_MAX;
    void* copy_out_to = nullptr;           // caller's memory, or null
    uint64_t bytes = 0;
  };

  explicit ClientImpl(const ClientOptions& options);
  absl::Status Attach();
  void WatchStream();
  // Moves completions out of the ring into done_.
  void DrainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(completion_mu_);
  // Sleeps until the completion doorbell rings, the session dies or `until`.
  void SleepForCompletions(absl::Time until);
  absl::Status DeadStatus() const;
  bool Dead() const;
  void Finish(uint64_t id, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(completion_mu_);
  void FreeStaging(const Pending& p);

  const ClientOptions options_;
  SharedSegment segment_;
  abi::v1::SegmentHeader* header_ = nullptr;
  std::shared_ptr<HostBuffer::Arena> arena_;
  uint32_t completion_capacity_ = 0;

  absl::Mutex submit_mu_;
  SpscRing<abi::v1::SubmitSlot> submit_ring_ ABSL_GUARDED_BY(submit_mu_);

  absl::Mutex completion_mu_;
  SpscRing<abi::v1::CompletionSlot> completion_ring_;
  uint64_t ring_in_flight_ ABSL_GUARDED_BY(completion_mu_) = 0;
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(completion_mu_);
  absl::flat_hash_map<uint64_t, absl::Status> done_ ABSL_GUARDED_BY(completion_mu_);
  std::atomic<uint64_t> next_id_{1};

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<kolo::v1::Node::Stub> stub_;
  grpc::ClientContext attach_context_;
  std::unique_ptr<grpc::ClientReaderWriter<kolo::v1::ClientMessage,
                                           kolo::v1::DaemonMessage>>
      stream_;
  std::string session_id_;
  std::thread watcher_;

  mutable absl::Mutex dead_mu_;
  std::atomic<bool> dead_{false};
  absl::Status dead_status_ ABSL_GUARDED_BY(dead_mu_);
};

}  // namespace kolo
