#include "client/submission_queue.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/futex.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo {
namespace {

using abi::v1::CompletionSlot;
using abi::v1::SegmentHeader;
using abi::v1::SubmitSlot;

constexpr uint32_t kSubmitCapacity = 1024;
constexpr uint32_t kCompletionCapacity = 4096;

// The submission slot of `spec`, its tensors at the given arena offsets.
SubmitSlot MakeSlot(const SubmitSpec& spec, uint64_t request_id, uint64_t in_off, uint64_t out_off,
                    uint64_t aux_off) {
  const ConstTensorView& input = spec.input;
  SubmitSlot slot{};
  slot.request_id = request_id;
  slot.kind = static_cast<uint32_t>(spec.kind);
  slot.dtype = static_cast<uint32_t>(input.dtype);
  slot.reduce_op = static_cast<uint32_t>(spec.reduce.op);
  slot.root_rank = spec.root_rank;
  slot.prescale = spec.reduce.prescale;
  slot.postscale = spec.reduce.postscale;
  slot.compression = static_cast<uint32_t>(spec.reduce.compression);
  slot.input_offset = in_off;
  slot.output_offset = out_off;
  slot.byte_length = input.byte_size();
  const std::vector<int64_t>& shape = spec.part_of.has_value() ? *spec.part_of : input.shape;
  slot.ndim = static_cast<uint32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) slot.shape[i] = shape[i];
  if (spec.part_of.has_value()) slot.flags |= abi::v1::kSlotFlagPart;
  slot.name_length = static_cast<uint32_t>(spec.name.size());
  std::memcpy(slot.name, spec.name.data(), spec.name.size());
  slot.process_set = static_cast<uint32_t>(spec.process_set);
  slot.group_id = spec.group_id;
  slot.group_size = spec.group_size;
  slot.aux_offset = aux_off;
  slot.aux_count = spec.aux.size();
  return slot;
}

absl::Status UnknownHandle(Handle handle) {
  return absl::InvalidArgumentError(absl::StrCat("unknown or already consumed handle ", handle.id));
}

}  // namespace

// ---- The segment and the arena ----

absl::Status SubmissionQueue::MapSegment(const ClientOptions& options) {
  abi::v1::Layout layout =
      abi::v1::ComputeLayout(kSubmitCapacity, kCompletionCapacity, options.arena_bytes);
  auto segment = SharedSegment::Create(layout.total_bytes);
  if (!segment.ok()) return segment.status();
  segment_ = std::make_shared<SharedSegment>(*std::move(segment));
  uint8_t* base = segment_->data();
  uint64_t result_bytes =
      options.result_bytes != 0 ? options.result_bytes : abi::v1::AlignUp(options.arena_bytes) / 4;
  SegmentHeader* h = abi::v1::InitSegmentHeader(base, kSubmitCapacity, kCompletionCapacity,
                                                options.arena_bytes, result_bytes);
  header_ = h;
  completion_capacity_ = kCompletionCapacity;
  arena_ = std::make_shared<HostBuffer::Arena>(segment_, base + layout.arena_offset,
                                               h->arena_bytes, h->arena_bytes - result_bytes);
  {
    absl::MutexLock l(&arena_->mu);
    arena_->release_result = [this](uint64_t offset) { ReleaseResult(offset); };
  }
  {
    absl::MutexLock l(&submit_mu_);
    submit_ring_ = SpscRing<SubmitSlot>(&h->submit_tail, &h->submit_head,
                                        reinterpret_cast<SubmitSlot*>(base + layout.submit_offset),
                                        kSubmitCapacity);
  }
  completion_ring_ = SpscRing<CompletionSlot>(
      &h->completion_tail, &h->completion_head,
      reinterpret_cast<CompletionSlot*>(base + layout.completion_offset), kCompletionCapacity);
  return absl::OkStatus();
}

void SubmissionQueue::DetachArena() {
  if (arena_ == nullptr) return;
  absl::MutexLock l(&arena_->mu);
  arena_->release_result = nullptr;
}

absl::StatusOr<HostBuffer> SubmissionQueue::Allocate(DType dtype, std::vector<int64_t> shape) {
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
  return MakeHostBuffer(arena_, arena_->base + offset, bytes, dtype, std::move(shape));
}

bool SubmissionQueue::InArena(const void* p, uint64_t bytes) const {
  absl::MutexLock l(&arena_->mu);
  return arena_->Contains(p, bytes);
}

void SubmissionQueue::FreeStaging(const Pending& p) {
  absl::MutexLock l(&arena_->mu);
  FreeStagingLocked(p);
}

void SubmissionQueue::FreeStagingLocked(const Pending& p) {
  if (p.input_staging != UINT64_MAX) arena_->alloc.Free(p.input_staging);
  if (p.output_staging != UINT64_MAX && p.output_staging != p.input_staging) {
    arena_->alloc.Free(p.output_staging);
  }
  if (p.aux_staging != UINT64_MAX) arena_->alloc.Free(p.aux_staging);
}

// ---- Submission ----

// A submission, in order: place its tensors in the arena (in place when the
// caller allocated them there, else through staging copies); write the
// slot (device tensors: their IPC handles); wait for room among the
// requests in flight; push the slot and ring kolod's doorbell.
absl::StatusOr<Handle> SubmissionQueue::Enqueue(const SubmitSpec& spec, uint64_t whole,
                                                uint64_t part) {
  const ConstTensorView& input = spec.input;
  const bool on_device = OnDevice(spec);
  Pending p;
  p.kind = spec.kind;
  p.dtype = input.dtype;
  p.process_set = spec.process_set;
  p.bytes = input.byte_size();
  if (!input.shape.empty()) p.row_shape.assign(input.shape.begin() + 1, input.shape.end());
  uint64_t in_off = 0, out_off = 0, aux_off = 0;
  const bool by_address = ByAddress(spec, on_device, p.bytes);
  if (by_address) {
    in_off = reinterpret_cast<uint64_t>(input.data);
    out_off = reinterpret_cast<uint64_t>(spec.output.data);
  } else if (absl::Status s = PlaceInArena(spec, on_device, &p, &in_off, &out_off, &aux_off);
             !s.ok()) {
    return s;
  }
  SubmitSlot slot = MakeSlot(spec, NextId(), in_off, out_off, aux_off);
  if (by_address) slot.flags |= abi::v1::kSlotFlagCallerMemory;
  if (on_device) {
    auto pending =
        device_io_->Prepare(input.data, p.bytes, spec.output.data, spec.output.byte_size(),
                            input.device, spec.reduce.cuda_stream, &slot);
    if (!pending.ok()) {
      FreeStaging(p);
      // The other ranks learn of it too (a refusal), rather than wait.
      return Refuse(spec, absl::Status(pending.status().code(),
                                       absl::StrCat(CollectiveKindName(spec.kind), " \"",
                                                    std::string(spec.name),
                                                    "\": ", pending.status().message())));
    }
    p.device = std::move(*pending);
  }
  p.whole = whole;
  p.first_part = whole != 0 && part == 0;
  if (absl::Status s = ReserveInFlight(slot.request_id, p); !s.ok()) return s;
  if (absl::Status s = PushSlot(slot, p); !s.ok()) return s;
  RingDoorbell(&header_->submit_ready);
  return Handle{slot.request_id};
}

absl::Status SubmissionQueue::Refuse(const SubmitSpec& spec, const absl::Status& why) {
  if (!Traits(spec.kind).tensor) return why;
  if (why.ok() || session_->Dead() || !Naming::KolodTakes(spec.name)) return why;
  const absl::string_view reason =
      why.message().substr(0, std::min<size_t>(why.message().size(), abi::v1::kMaxMessageBytes));
  Pending p;
  p.kind = spec.kind;
  p.process_set = spec.process_set;
  p.refusal = true;
  {
    absl::MutexLock l(&arena_->mu);
    auto o = arena_->alloc.Allocate(std::max<size_t>(reason.size(), 1));
    if (!o.ok()) return why;  // the others then wait for the stall timeout
    p.input_staging = *o;
    if (!reason.empty()) std::memcpy(arena_->base + *o, reason.data(), reason.size());
  }
  SubmitSlot slot{};
  slot.request_id = NextId();
  slot.kind = static_cast<uint32_t>(spec.kind);
  slot.name_length = static_cast<uint32_t>(spec.name.size());
  std::memcpy(slot.name, spec.name.data(), spec.name.size());
  slot.process_set = static_cast<uint32_t>(spec.process_set);
  slot.group_id = spec.group_id;
  slot.group_size = spec.group_size;
  slot.flags = abi::v1::kSlotFlagRefusal;
  slot.input_offset = p.input_staging;
  slot.byte_length = reason.size();
  if (!ReserveInFlight(slot.request_id, p).ok()) return why;
  if (!PushSlot(slot, p).ok()) return why;
  RingDoorbell(&header_->submit_ready);
  return why;
}

bool SubmissionQueue::ByAddress(const SubmitSpec& spec, bool on_device, uint64_t bytes) const {
  if (!session_->caller_memory() || on_device || !Traits(spec.kind).in_place ||
      bytes < session_->options().caller_memory_min_bytes || spec.input.data == nullptr ||
      spec.output.data == nullptr) {
    return false;
  }
  // A tensor in the arena is already where kolod reads it.
  absl::MutexLock l(&arena_->mu);
  return !arena_->Contains(spec.input.data, bytes) && !arena_->Contains(spec.output.data, bytes);
}

absl::Status SubmissionQueue::PlaceInArena(const SubmitSpec& spec, bool on_device, Pending* p,
                                           uint64_t* in_off, uint64_t* out_off,
                                           uint64_t* aux_off) {
  const ConstTensorView& input = spec.input;
  const uint64_t bytes = p->bytes;
  absl::MutexLock l(&arena_->mu);
  if (bytes > 0 && !on_device) {
    if (arena_->Contains(input.data, bytes)) {
      *in_off = static_cast<const uint8_t*>(input.data) - arena_->base;
    } else {
      auto o = arena_->alloc.Allocate(bytes);
      if (!o.ok()) return o.status();
      p->input_staging = *in_off = *o;
      std::memcpy(arena_->base + *in_off, input.data, bytes);
    }
    if (!Traits(spec.kind).in_place) {
      *out_off = *in_off;
    } else if (arena_->Contains(spec.output.data, bytes)) {
      *out_off = static_cast<uint8_t*>(spec.output.data) - arena_->base;
    } else if (p->input_staging != UINT64_MAX) {
      p->output_staging = *out_off = *in_off;
      p->copy_out_to = spec.output.data;
    } else {
      auto o = arena_->alloc.Allocate(bytes);
      if (!o.ok()) return o.status();
      p->output_staging = *out_off = *o;
      p->copy_out_to = spec.output.data;
    }
  }
  if (spec.aux.empty()) return absl::OkStatus();
  auto o = arena_->alloc.Allocate(spec.aux.size() * sizeof(int64_t));
  if (!o.ok()) {
    FreeStagingLocked(*p);
    return o.status();
  }
  p->aux_staging = *aux_off = *o;
  std::memcpy(arena_->base + *aux_off, spec.aux.data(), spec.aux.size() * sizeof(int64_t));
  return absl::OkStatus();
}

absl::Status SubmissionQueue::ReserveInFlight(uint64_t request_id, const Pending& p) {
  // Keep at most completion_capacity requests between the rings, so kolod
  // always has room for their completions.
  for (;;) {
    {
      absl::MutexLock l(&completion_mu_);
      DrainLocked();
      if (ring_in_flight_ < completion_capacity_) {
        ++ring_in_flight_;
        pending_[request_id] = p;
        return absl::OkStatus();
      }
    }
    if (session_->Dead()) {
      FreeStaging(p);
      return session_->DeadStatus();
    }
    SleepForCompletions(absl::Now() + kMaxSleep);
  }
}

RingResult SubmissionQueue::Push(const SubmitSlot& slot) {
  absl::MutexLock l(&submit_mu_);
  for (;;) {
    RingResult r = submit_ring_.TryPush(slot);
    if (r != RingResult::kEmptyOrFull || session_->Dead()) return r;
    SleepOnDoorbell(
        &header_->submit_space,
        [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return submit_ring_.HasSpace() || session_->Dead();
        },
        kMaxSleep, session_->options().spin);
  }
}

absl::Status SubmissionQueue::PushSlot(const SubmitSlot& slot, const Pending& p) {
  const RingResult r = Push(slot);
  if (r == RingResult::kOk) return absl::OkStatus();
  {
    absl::MutexLock l(&completion_mu_);
    pending_.erase(slot.request_id);
    --ring_in_flight_;
  }
  FreeStaging(p);
  return r == RingResult::kCorrupt ? absl::InternalError("submission ring indices corrupted")
                                   : session_->DeadStatus();
}

void SubmissionQueue::ReleaseResult(uint64_t arena_offset) {
  if (session_->Dead()) return;
  SubmitSlot slot{};
  slot.kind = abi::v1::kReleaseResult;
  slot.input_offset = arena_offset;
  if (Push(slot) == RingResult::kOk) RingDoorbell(&header_->submit_ready);
}

// ---- Tensors in parts ----

void SubmissionQueue::AddWhole(uint64_t id, const SubmitSpec& spec) {
  Pending p;
  p.kind = spec.kind;
  p.dtype = spec.input.dtype;
  p.process_set = spec.process_set;
  p.bytes = spec.input.byte_size();
  absl::MutexLock l(&completion_mu_);
  pending_[id] = std::move(p);
}

void SubmissionQueue::RemoveWhole(uint64_t id) {
  absl::MutexLock l(&completion_mu_);
  pending_.erase(id);
}

void SubmissionQueue::CompleteWhole(uint64_t id, const absl::Status& status) {
  absl::MutexLock l(&completion_mu_);
  CompleteWholeLocked(id, status);
}

void SubmissionQueue::CompleteWholeLocked(uint64_t id, const absl::Status& status) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;  // the caller gave up on it (a dead session)
  const Pending& w = it->second;
  Done d;
  d.status = status;
  d.kind = w.kind;
  d.dtype = w.dtype;
  d.process_set = w.process_set;
  done_[id] = std::move(d);
  pending_.erase(it);
}

// ---- Completions ----

void SubmissionQueue::Drain() {
  absl::MutexLock l(&completion_mu_);
  DrainLocked();
}

void SubmissionQueue::DrainLocked() {
  bool parts_progressed = false;
  CompletionSlot slot;
  while (completion_ring_.TryPop(&slot) == RingResult::kOk) {
    --ring_in_flight_;
    absl::Status status;
    if (slot.code != 0) {
      uint32_t len = std::min(slot.message_length, abi::v1::kMaxMessageBytes);
      status = absl::Status(static_cast<absl::StatusCode>(slot.code),
                            absl::string_view(slot.message, len));
    }
    auto it = pending_.find(slot.request_id);
    if (it == pending_.end()) continue;
    const Pending& p = it->second;
    if (p.refusal) {
      FreeStaging(p);
      pending_.erase(it);
      continue;
    }
    if (p.device != nullptr) {
      absl::Status ordered = p.device->Complete(status);
      if (status.ok()) status = ordered;
    }
    if (status.ok() && p.copy_out_to != nullptr && p.bytes > 0) {
      std::memcpy(p.copy_out_to, arena_->base + p.output_staging, p.bytes);
    }
    FreeStaging(p);
    if (p.whole != 0) {
      const uint64_t whole = p.whole;
      const bool first = p.first_part;
      pending_.erase(it);
      parts_progressed = true;
      std::optional<absl::Status> finished = parts_->PartCompleted(whole, first, status);
      if (finished.has_value()) CompleteWholeLocked(whole, *finished);
      continue;
    }
    Done d = ToDone(p, slot, std::move(status));
    pending_.erase(it);
    done_[slot.request_id] = std::move(d);
  }
  // The pump sleeps on the completion doorbell: it learns here that it may
  // send more.
  if (parts_progressed) parts_->PartsProgressed();
}

SubmissionQueue::Done SubmissionQueue::ToDone(const Pending& p, const CompletionSlot& slot,
                                              absl::Status status) const {
  Done d;
  d.status = std::move(status);
  d.kind = p.kind;
  d.dtype = p.dtype;
  d.row_shape = p.row_shape;
  d.process_set = p.process_set;
  if (!d.status.ok()) return d;
  d.value = slot.value;
  if (ReturnsResult(p.kind) && p.device == nullptr) {
    // Results must lie in the result area; anything else is ignored.
    // (A device request's result is in its own output.)
    uint64_t begin = arena_->size - header_->result_bytes;
    if (slot.result_offset >= begin && slot.result_offset <= arena_->size &&
        slot.result_bytes <= arena_->size - slot.result_offset) {
      d.result_offset = slot.result_offset;
      d.result_bytes = slot.result_bytes;
    } else {
      d.status = absl::InternalError("kolod placed a result outside the result area");
    }
  }
  return d;
}

void SubmissionQueue::SleepForCompletions(absl::Time until, absl::FunctionRef<bool()> wake) {
  absl::Duration left = std::min(until - absl::Now(), kMaxSleep);
  if (left <= absl::ZeroDuration()) return;
  SleepOnDoorbell(
      &header_->completion_ready,
      [&] { return completion_ring_.HasData() || session_->Dead() || wake(); }, left,
      session_->options().spin);
}

void SubmissionQueue::SleepForCompletions(absl::Time until) {
  SleepForCompletions(until, [] { return false; });
}

void SubmissionQueue::WakeCompletionSleepers() { RingDoorbell(&header_->completion_ready); }

// ---- Waiting on handles ----

absl::StatusOr<SubmissionQueue::HandleState> SubmissionQueue::AwaitHandle(Handle handle,
                                                                          absl::Duration timeout) {
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  // While a thread waits on or tests a handle it sends the parts of tensors
  // in parts itself (the pump stands by): one thread per rank copying, not
  // two, and no hand-off per part for a framework op polling its handle.
  parts_->BeginWait();
  absl::Cleanup end_wait = [this] { parts_->EndWait(); };
  for (;;) {
    parts_->SendParts();
    {
      absl::MutexLock l(&completion_mu_);
      if (done_.contains(handle.id)) return HandleState::kDone;
      if (!pending_.contains(handle.id)) return UnknownHandle(handle);
      if (session_->Dead()) return HandleState::kDead;
    }
    if (absl::Now() >= deadline) return HandleState::kRunning;
    SleepForCompletions(deadline);
  }
}

absl::StatusOr<SubmissionQueue::Done> SubmissionQueue::WaitDone(Handle handle,
                                                                absl::Duration timeout) {
  absl::StatusOr<HandleState> state = AwaitHandle(handle, timeout);
  if (!state.ok()) return state.status();
  if (*state == HandleState::kRunning) {
    return absl::DeadlineExceededError(absl::StrCat("collective ", handle.id, " still running"));
  }
  absl::MutexLock l(&completion_mu_);
  auto done = done_.find(handle.id);
  if (done != done_.end()) {
    Done d = std::move(done->second);
    done_.erase(done);
    return d;
  }
  auto p = pending_.find(handle.id);
  if (p == pending_.end()) return UnknownHandle(handle);  // another thread took it meanwhile
  // The session died with it in flight.
  Pending left = std::move(p->second);
  pending_.erase(p);
  FreeStaging(left);
  parts_->Abandoned(handle.id);
  return session_->DeadStatus();
}

absl::Status SubmissionQueue::WaitFor(Handle handle, absl::Duration timeout) {
  auto d = WaitDone(handle, timeout);
  if (!d.ok()) return d.status();
  // The caller wants no output tensor: hand it straight back.
  if (d->status.ok() && d->result_bytes > 0) ReleaseResult(d->result_offset);
  return d->status;
}

absl::StatusOr<int64_t> SubmissionQueue::WaitValue(Handle handle) {
  auto d = WaitDone(handle, absl::InfiniteDuration());
  if (!d.ok()) return d.status();
  if (!d->status.ok()) return d->status;
  return d->value;
}

absl::StatusOr<HostBuffer> SubmissionQueue::WaitForOutput(Handle handle, const Naming& names) {
  auto d = WaitDone(handle, absl::InfiniteDuration());
  if (!d.ok()) return d.status();
  if (!d->status.ok()) return d->status;
  if (!ReturnsResult(d->kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat(CollectiveKindName(d->kind), " returns no new tensor; use Wait"));
  }
  if (Traits(d->kind).splits) {
    // Re-queue the completion and read it as an alltoall.
    {
      absl::MutexLock l(&completion_mu_);
      done_[handle.id] = *std::move(d);
      pending_.erase(handle.id);
    }
    auto a = WaitForAlltoall(handle, names);
    if (!a.ok()) return a.status();
    return std::move(a->output);
  }
  std::vector<int64_t> shape = {d->value};
  shape.insert(shape.end(), d->row_shape.begin(), d->row_shape.end());
  return MakeHostBuffer(arena_, arena_->base + d->result_offset, d->result_bytes, d->dtype,
                    std::move(shape), static_cast<int64_t>(d->result_offset));
}

absl::StatusOr<AlltoallResult> SubmissionQueue::WaitForAlltoall(Handle handle,
                                                                const Naming& names) {
  auto d = WaitDone(handle, absl::InfiniteDuration());
  if (!d.ok()) return d.status();
  if (!d->status.ok()) return d->status;
  if (!Traits(d->kind).splits) {
    if (d->result_bytes > 0) ReleaseResult(d->result_offset);
    return absl::InvalidArgumentError(
        absl::StrCat(CollectiveKindName(d->kind), " is not an alltoall"));
  }
  auto n = names.ProcessSetSize(d->process_set);
  if (!n.ok()) {
    ReleaseResult(d->result_offset);
    return n.status();
  }
  // The result starts with the received splits, padded to 64 bytes.
  const uint64_t header = abi::v1::AlltoallResultHeaderBytes(static_cast<uint64_t>(*n));
  if (d->result_bytes < header) {
    ReleaseResult(d->result_offset);
    return absl::InternalError("alltoall result shorter than its splits");
  }
  AlltoallResult out;
  out.received_splits.resize(*n);
  std::memcpy(out.received_splits.data(), arena_->base + d->result_offset, *n * sizeof(int64_t));
  std::vector<int64_t> shape = {d->value};
  shape.insert(shape.end(), d->row_shape.begin(), d->row_shape.end());
  out.output =
      MakeHostBuffer(arena_, arena_->base + d->result_offset + header, d->result_bytes - header,
                 d->dtype, std::move(shape), static_cast<int64_t>(d->result_offset));
  return out;
}

absl::StatusOr<bool> SubmissionQueue::Test(Handle handle, absl::Duration timeout) {
  // A handle of a dead session tests done: Wait reports why.
  absl::StatusOr<HandleState> state = AwaitHandle(handle, timeout);
  if (!state.ok()) return state.status();
  return *state != HandleState::kRunning;
}

absl::StatusOr<bool> SubmissionQueue::Underway(Handle handle) {
  absl::MutexLock l(&completion_mu_);
  DrainLocked();
  if (done_.contains(handle.id) || session_->Dead()) return true;  // (Wait reports a death)
  if (!pending_.contains(handle.id)) return UnknownHandle(handle);
  // Every rank submitted the first part before it completed, and each
  // rank's later parts are sent by its waiting thread or its pump.
  return parts_->FirstDone(handle.id);
}

}  // namespace kolo
