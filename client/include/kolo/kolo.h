// libkolo's C++ API: attach a training process (a rank) to its node's kolod
// and run collectives on host tensors.
//
//   auto client = kolo::Client::Connect(kolo::ClientOptions::FromEnv().value());
//   kolo::HostBuffer grad = client.value()->Allocate(kolo::DType::kFloat32, {256, 10}).value();
//   ... fill grad.data() ...
//   absl::Status s = client.value()->Allreduce(grad.view(), grad.view(), "grad/w1",
//                                              kolo::ReduceOp::kAverage);
//
// Tensors live either in SDK-allocated shared memory (`Client::Allocate`,
// zero copy) or in the caller's own memory (copied in at submission and out at
// completion; the caller keeps the memory alive and untouched until Wait).
//
// Thread-safety: Client is safe to use from several threads; HostBuffer and
// Handle are values owned by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/kolo/abi/types.h"

namespace kolo {

// Where and who this process is. FromEnv reads KOLO_SOCKET (default
// /run/kolo/kolod.sock), KOLO_JOB_ID, KOLO_JOB_TOKEN, KOLO_RANK, KOLO_SIZE,
// KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE, KOLO_ARENA_BYTES and KOLO_SPIN_US; a missing rank/size
// means a job of one rank.
struct ClientOptions {
  std::string socket_path = "/run/kolo/kolod.sock";
  std::string job_id = "default";
  std::string job_token;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  // Bytes of shared memory for host tensors (sparse: pages are used on touch).
  uint64_t arena_bytes = uint64_t{1} << 30;
  // How long a waiting call polls before it sleeps (KOLO_SPIN_US).
  absl::Duration spin = absl::Microseconds(50);
  // How long Connect waits for the daemon's socket to appear.
  absl::Duration connect_timeout = absl::Seconds(10);

  static absl::StatusOr<ClientOptions> FromEnv();
};

// A non-owning view of a host tensor: `data` points at `shape`'s elements of
// `dtype`, densely packed in row-major order.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;

  int64_t num_elements() const;
  uint64_t byte_size() const;
};

struct ConstTensorView {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;

  ConstTensorView() = default;
  ConstTensorView(const void* d, DType t, std::vector<int64_t> s)
      : data(d), dtype(t), shape(std::move(s)) {}
  ConstTensorView(const TensorView& v)  // NOLINT: a mutable view is readable.
      : data(v.data), dtype(v.dtype), shape(v.shape) {}

  int64_t num_elements() const;
  uint64_t byte_size() const;
};

class Client;

// A tensor in the session's shared-memory arena: collectives on it move no
// bytes between the process and kolod. Freed when destroyed; must not outlive
// the Client that allocated it.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  uint64_t byte_size() const { return bytes_; }
  TensorView view() const { return TensorView{data_, dtype_, shape_}; }

  struct Arena;  // opaque: the session arena's allocator

 private:
  friend class Client;
  friend class ClientImpl;
  HostBuffer(std::shared_ptr<Arena> arena, void* data, uint64_t bytes,
             DType dtype, std::vector<int64_t> shape)
      : arena_(std::move(arena)), data_(data), bytes_(bytes), dtype_(dtype),
        shape_(std::move(shape)) {}
  void Release();

  std::shared_ptr<Arena> arena_;
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_;
};

// Identifies one submitted collective until Wait or a successful Test.
struct Handle {
  uint64_t id = 0;
};

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;
  // Each input is multiplied by `prescale` before the reduction and the
  // result by `postscale` after it (average divides by size on top).
  double prescale = 1.0;
  double postscale = 1.0;
};

class ClientImpl;

class Client {
 public:
  // Attaches to kolod: creates the session's shared-memory segment and opens
  // the Attach stream. UNAVAILABLE when no daemon answers in time.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const ClientOptions& options);
  ~Client();  // Detaches; pending collectives fail with CANCELLED.

  int rank() const;
  int size() const;
  int local_rank() const;
  int local_size() const;
  const std::string& session_id() const;

  // A zero-copy tensor in the session's arena.
  absl::StatusOr<HostBuffer> Allocate(DType dtype, std::vector<int64_t> shape);

  // Reduces `input` across the job's ranks into `output` (same dtype and
  // shape; may be the same memory). `name` identifies the collective across
  // ranks and must not be in flight twice on one rank.
  absl::StatusOr<Handle> AllreduceAsync(const ConstTensorView& input,
                                        const TensorView& output,
                                        std::string_view name,
                                        const AllreduceOptions& options = {});
  absl::Status Allreduce(const ConstTensorView& input, const TensorView& output,
                         std::string_view name,
                         const AllreduceOptions& options = {});
  absl::Status Allreduce(const ConstTensorView& input, const TensorView& output,
                         std::string_view name, ReduceOp op) {
    return Allreduce(input, output, name, AllreduceOptions{.op = op});
  }

  // Replaces `tensor` on every rank with root_rank's `tensor`.
  absl::StatusOr<Handle> BroadcastAsync(const TensorView& tensor,
                                        std::string_view name, int root_rank);
  absl::Status Broadcast(const TensorView& tensor, std::string_view name,
                         int root_rank);

  // Blocks until the collective completes; its result. Consumes the handle.
  absl::Status Wait(Handle handle);
  // Waits at most `timeout`; DEADLINE_EXCEEDED if still running (the handle
  // stays valid).
  absl::Status WaitFor(Handle handle, absl::Duration timeout);
  // True once complete (then Wait returns at once with the result).
  absl::StatusOr<bool> Test(Handle handle);

 private:
  explicit Client(std::unique_ptr<ClientImpl> impl);
  std::unique_ptr<ClientImpl> impl_;
};

}  // namespace kolo
