#include "client/client_impl.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/futex.h"

namespace kolo {
namespace {

using abi::v1::CompletionSlot;
using abi::v1::SegmentHeader;
using abi::v1::SubmitSlot;

constexpr uint32_t kSubmitCapacity = 1024;
constexpr uint32_t kCompletionCapacity = 4096;
// Sleepers re-check the session's liveness at least this often.
constexpr absl::Duration kMaxSleep = absl::Milliseconds(100);

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

}  // namespace

ClientImpl::ClientImpl(const ClientOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<ClientImpl>> ClientImpl::Connect(
    const ClientOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " outside a job of size ", options.size));
  }
  std::unique_ptr<ClientImpl> c(new ClientImpl(options));
  abi::v1::Layout layout = abi::v1::ComputeLayout(
      kSubmitCapacity, kCompletionCapacity, options.arena_bytes);
  auto segment = SharedSegment::Create(layout.total_bytes);
  if (!segment.ok()) return segment.status();
  c->segment_ = std::move(*segment);
  uint8_t* base = c->segment_.data();
  auto* h = new (base) SegmentHeader();
  h->magic = abi::v1::kMagic;
  h->version = abi::v1::kVersion;
  h->header_bytes = sizeof(SegmentHeader);
  h->submit_capacity = kSubmitCapacity;
  h->completion_capacity = kCompletionCapacity;
  h->submit_offset = layout.submit_offset;
  h->completion_offset = layout.completion_offset;
  h->arena_offset = layout.arena_offset;
  h->arena_bytes = abi::v1::AlignUp(options.arena_bytes);
  h->total_bytes = layout.total_bytes;
  c->header_ = h;
  c->completion_capacity_ = kCompletionCapacity;
  c->arena_ = std::make_shared<HostBuffer::Arena>(base + layout.arena_offset,
                                                  h->arena_bytes);
  {
    absl::MutexLock l(&c->submit_mu_);
    c->submit_ring_ = SpscRing<SubmitSlot>(
        &h->submit_tail, &h->submit_head,
        reinterpret_cast<SubmitSlot*>(base + layout.submit_offset),
        kSubmitCapacity);
  }
  c->completion_ring_ = SpscRing<CompletionSlot>(
      &h->completion_tail, &h->completion_head,
      reinterpret_cast<CompletionSlot*>(base + layout.completion_offset),
      kCompletionCapacity);
  if (absl::Status s = c->Attach(); !s.ok()) return s;
  return c;
}

absl::Status ClientImpl::Attach() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  channel_ = grpc::CreateCustomChannel("unix:" + options_.socket_path,
                                       grpc::InsecureChannelCredentials(), args);
  if (!channel_->WaitForConnected(std::chrono::system_clock::now() +
                                  absl::ToChronoNanoseconds(options_.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat(
        "no kolod is answering on ", options_.socket_path,
        " (start kolod --socket PATH, set KOLO_SOCKET, or run under kolorun)"));
  }
  stub_ = kolo::v1::Node::NewStub(channel_);
  stream_ = stub_->Attach(&attach_context_);
  kolo::v1::ClientMessage hello;
  auto* a = hello.mutable_attach();
  a->set_job_id(options_.job_id);
  a->set_job_token(options_.job_token);
  a->set_rank(options_.rank);
  a->set_size(options_.size);
  a->set_local_rank(options_.local_rank);
  a->set_local_size(options_.local_size);
  a->set_pid(getpid());
  a->set_shm_fd(segment_.fd());
  a->set_shm_bytes(segment_.size());
  a->set_shm_abi_version(abi::v1::kVersion);
  kolo::v1::DaemonMessage reply;
  if (!stream_->Write(hello) || !stream_->Read(&reply) || !reply.has_attached()) {
    grpc::Status s = stream_->Finish();
    absl::Status err = FromGrpc(s);
    if (err.ok()) err = absl::UnavailableError("kolod ended the attach");
    return absl::Status(err.code(), absl::StrCat("attach to kolod at ",
                                                 options_.socket_path,
                                                 " as rank ", options_.rank,
                                                 ": ", err.message()));
  }
  session_id_ = reply.attached().session_id();
  watcher_ = std::thread([this] { WatchStream(); });
  return absl::OkStatus();
}

void ClientImpl::WatchStream() {
  kolo::v1::DaemonMessage msg;
  absl::Status event;
  while (stream_->Read(&msg)) {
    if (msg.has_event() && event.ok()) {
      event = absl::Status(static_cast<absl::StatusCode>(msg.event().code()),
                           msg.event().message());
    }
  }
  grpc::Status end = stream_->Finish();
  absl::Status why = event;
  if (why.ok()) {
    why = absl::UnavailableError(absl::StrCat(
        "lost kolod at ", options_.socket_path, ": ",
        end.ok() ? "it ended the session" : end.error_message()));
  }
  {
    absl::MutexLock l(&dead_mu_);
    dead_status_ = why;
  }
  dead_.store(true, std::memory_order_release);
  // Wake every waiter of this process; they find the session dead.
  header_->completion_ready.seq.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&header_->completion_ready.seq);
  header_->submit_space.seq.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&header_->submit_space.seq);
}

bool ClientImpl::Dead() const {
  return dead_.load(std::memory_order_acquire) ||
         header_->session_state.load(std::memory_order_acquire) !=
             abi::v1::kSessionOpen;
}

absl::Status ClientImpl::DeadStatus() const {
  if (dead_.load(std::memory_order_acquire)) {
    absl::MutexLock l(&dead_mu_);
    return dead_status_;
  }
  return absl::UnavailableError(absl::StrCat(
      "kolod at ", options_.socket_path, " closed the session"));
}

ClientImpl::~ClientImpl() {
  if (stub_ != nullptr && !dead_.load()) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    kolo::v1::DetachRequest req;
    req.set_session_id(session_id_);
    kolo::v1::DetachResponse resp;
    (void)stub_->Detach(&ctx, req, &resp);
  }
  if (stream_ != nullptr) attach_context_.TryCancel();
  if (watcher_.joinable()) watcher_.join();
}

absl::StatusOr<HostBuffer> ClientImpl::Allocate(DType dtype,
                                                std::vector<int64_t> shape) {
  if (static_cast<uint32_t>(dtype) >= kNumDTypes) {
    return absl::InvalidArgumentError("unknown dtype");
  }
  uint64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("negative dimension");
    if (d != 0 && elements > (uint64_t{1} << 62) / static_cast<uint64_t>(d)) {
      return absl::InvalidArgumentError("shape overflows");
    }
    elements *= static_cast<uint64_t>(d);
  }
  uint64_t bytes = elements * DTypeSize(dtype);
  uint64_t offset;
  {
    absl::MutexLock l(&arena_->mu);
    auto o = arena_->alloc.Allocate(bytes);
    if (!o.ok()) return o.status();
    offset = *o;
  }
  return HostBuffer(arena_, arena_->base + offset, bytes, dtype,
                    std::move(shape));
}

void ClientImpl::FreeStaging(const Pending& p) {
  absl::MutexLock l(&arena_->mu);
  if (p.input_staging != UINT64_MAX) arena_->alloc.Free(p.input_staging);
  if (p.output_staging != UINT64_MAX && p.output_staging != p.input_staging) {
    arena_->alloc.Free(p.output_staging);
  }
}

absl::StatusOr<Handle> ClientImpl::Submit(CollectiveKind kind,
                                          const ConstTensorView& input,
                                          const TensorView& output,
                                          std::string_view name,
                                          const AllreduceOptions& options,
                                          int root_rank) {
  if (Dead()) return DeadStatus();
  if (name.empty() || name.size() > abi::v1::kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective name must be 1 to ", abi::v1::kMaxNameBytes, " bytes"));
  }
  if (input.shape.size() > abi::v1::kMaxDims) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", std::string(name), "\": at most ", abi::v1::kMaxDims,
        " dimensions"));
  }
  if (input.dtype != output.dtype || input.shape != output.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", std::string(name), "\": input and output differ in dtype or shape"));
  }
  if (static_cast<uint32_t>(input.dtype) >= kNumDTypes) {
    return absl::InvalidArgumentError("unknown dtype");
  }
  for (int64_t d : input.shape) {
    if (d < 0) return absl::InvalidArgumentError("negative dimension");
  }
  const uint64_t bytes = input.byte_size();

  // Place the tensor in the arena: in place when the caller allocated it
  // there, else through staging copies.
  Pending p;
  uint64_t in_off = 0, out_off = 0;
  {
    absl::MutexLock l(&arena_->mu);
    if (bytes == 0) {
      in_off = out_off = 0;
    } else {
      if (arena_->Contains(input.data, bytes)) {
        in_off = static_cast<const uint8_t*>(input.data) - arena_->base;
      } else {
        auto o = arena_->alloc.Allocate(bytes);
        if (!o.ok()) return o.status();
        p.input_staging = in_off = *o;
        std::memcpy(arena_->base + in_off, input.data, bytes);
      }
      if (arena_->Contains(output.data, bytes)) {
        out_off = static_cast<uint8_t*>(output.data) - arena_->base;
      } else if (p.input_staging != UINT64_MAX) {
        p.output_staging = out_off = in_off;
        p.copy_out_to = output.data;
      } else {
        auto o = arena_->alloc.Allocate(bytes);
        if (!o.ok()) return o.status();
        p.output_staging = out_off = *o;
        p.copy_out_to = output.data;
      }
    }
  }
  p.bytes = bytes;

  SubmitSlot slot{};
  slot.request_id = next_id_.fetch_add(1, std::memory_order_relaxed);
  slot.kind = static_cast<uint32_t>(kind);
  slot.dtype = static_cast<uint32_t>(input.dtype);
  slot.reduce_op = static_cast<uint32_t>(options.op);
  slot.root_rank = root_rank;
  slot.prescale = options.prescale;
  slot.postscale = options.postscale;
  slot.input_offset = in_off;
  slot.output_offset = out_off;
  slot.byte_length = bytes;
  slot.ndim = static_cast<uint32_t>(input.shape.size());
  for (size_t i = 0; i < input.shape.size(); ++i) slot.shape[i] = input.shape[i];
  slot.name_length = static_cast<uint32_t>(name.size());
  std::memcpy(slot.name, name.data(), name.size());

  // Keep at most completion_capacity requests between the rings, so kolod
  // always has room for their completions.
  for (;;) {
    {
      absl::MutexLock l(&completion_mu_);
      DrainLocked();
      if (ring_in_flight_ < completion_capacity_) {
        ++ring_in_flight_;
        pending_[slot.request_id] = p;
        break;
      }
    }
    if (Dead()) {
      FreeStaging(p);
      return DeadStatus();
    }
    SleepForCompletions(absl::Now() + kMaxSleep);
  }

  {
    absl::MutexLock l(&submit_mu_);
    for (;;) {
      RingResult r = submit_ring_.TryPush(slot);
      if (r == RingResult::kOk) break;
      if (r == RingResult::kCorrupt || Dead()) {
        absl::MutexLock cl(&completion_mu_);
        pending_.erase(slot.request_id);
        --ring_in_flight_;
        FreeStaging(p);
        return r == RingResult::kCorrupt
                   ? absl::InternalError("submission ring indices corrupted")
                   : DeadStatus();
      }
      SleepOnDoorbell(
          &header_->submit_space,
          [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return submit_ring_.HasSpace() || Dead();
          },
          kMaxSleep, options_.spin);
    }
  }
  RingDoorbell(&header_->submit_ready);
  return Handle{slot.request_id};
}

void ClientImpl::DrainLocked() {
  CompletionSlot slot;
  while (completion_ring_.TryPop(&slot) == RingResult::kOk) {
    --ring_in_flight_;
    absl::Status status;
    if (slot.code != 0) {
      uint32_t len = std::min(slot.message_length, abi::v1::kMaxMessageBytes);
      status = absl::Status(static_cast<absl::StatusCode>(slot.code),
                            absl::string_view(slot.message, len));
    }
    Finish(slot.request_id, status);
  }
}

void ClientImpl::Finish(uint64_t id, const absl::Status& status) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  const Pending& p = it->second;
  if (status.ok() && p.copy_out_to != nullptr && p.bytes > 0) {
    std::memcpy(p.copy_out_to, arena_->base + p.output_staging, p.bytes);
  }
  FreeStaging(p);
  pending_.erase(it);
  done_[id] = status;
}

void ClientImpl::SleepForCompletions(absl::Time until) {
  absl::Duration left = std::min(until - absl::Now(), kMaxSleep);
  if (left <= absl::ZeroDuration()) return;
  SleepOnDoorbell(
      &header_->completion_ready,
      [this] { return completion_ring_.HasData() || Dead(); }, left,
      options_.spin);
}

absl::Status ClientImpl::WaitFor(Handle handle, absl::Duration timeout) {
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + timeout;
  for (;;) {
    {
      absl::MutexLock l(&completion_mu_);
      DrainLocked();
      auto done = done_.find(handle.id);
      if (done != done_.end()) {
        absl::Status s = std::move(done->second);
        done_.erase(done);
        return s;
      }
      if (!pending_.contains(handle.id)) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown or already consumed handle ", handle.id));
      }
      if (Dead()) {
        Pending p = pending_[handle.id];
        pending_.erase(handle.id);
        FreeStaging(p);
        return DeadStatus();
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("collective ", handle.id, " still running"));
    }
    SleepForCompletions(deadline);
  }
}

absl::StatusOr<bool> ClientImpl::Test(Handle handle) {
  absl::MutexLock l(&completion_mu_);
  DrainLocked();
  if (done_.contains(handle.id)) return true;
  if (!pending_.contains(handle.id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown or already consumed handle ", handle.id));
  }
  if (Dead()) return true;  // Wait reports why
  return false;
}

}  // namespace kolo
