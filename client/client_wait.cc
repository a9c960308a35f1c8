// ClientImpl's completion side: draining the completion ring, waiting for
// and testing handles, and releasing results.
#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client_impl.h"
#include "common/futex.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo {

using abi::v1::CompletionSlot;
using abi::v1::SubmitSlot;

ClientImpl::Waiting::Waiting(ClientImpl* client) : client_(client) {
  absl::MutexLock l(&client_->completion_mu_);
  ++client_->waiting_;
}

ClientImpl::Waiting::~Waiting() {
  absl::MutexLock l(&client_->completion_mu_);
  --client_->waiting_;
}

void ClientImpl::DrainLocked() {
  bool kick_pump = false;
  // A part completed: the pump may send more. It sleeps on the completion
  // doorbell, so another thread that drained its completion rings it.
  absl::Cleanup kick = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // (A thread in WaitDone sends parts itself; the pump stands by.)
    if (!kick_pump || waiting_ > 0) return;
    pump_kick_.store(true, std::memory_order_release);
    if (std::this_thread::get_id() != pump_.get_id()) RingDoorbell(&header_->completion_ready);
  };
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
      if (auto w = wholes_.find(whole); w != wholes_.end()) {
        --w->second->in_flight;
        if (first) w->second->first_done = true;
        kick_pump = true;
      }
      PartDone(whole, status);
      continue;
    }
    Done d;
    d.status = std::move(status);
    d.kind = p.kind;
    d.dtype = p.dtype;
    d.row_shape = p.row_shape;
    d.process_set = p.process_set;
    if (d.status.ok()) {
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
    }
    pending_.erase(it);
    done_[slot.request_id] = std::move(d);
  }
}

void ClientImpl::SleepForCompletions(absl::Time until) {
  absl::Duration left = std::min(until - absl::Now(), kMaxSleep);
  if (left <= absl::ZeroDuration()) return;
  SleepOnDoorbell(
      &header_->completion_ready, [this] { return completion_ring_.HasData() || Dead(); }, left,
      options_.spin);
}

absl::StatusOr<ClientImpl::HandleState> ClientImpl::AwaitHandle(Handle handle,
                                                                absl::Duration timeout) {
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  // While a thread waits on or tests a handle it sends the parts of tensors
  // in parts itself (the pump stands by): one thread per rank copying, not
  // two, and no hand-off per part for a framework op polling its handle.
  Waiting waiting(this);
  for (;;) {
    bool sent = false;
    AdvanceParts(&sent);
    {
      absl::MutexLock l(&completion_mu_);
      if (done_.contains(handle.id)) return HandleState::kDone;
      if (!pending_.contains(handle.id)) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown or already consumed handle ", handle.id));
      }
      if (Dead()) return HandleState::kDead;
    }
    if (absl::Now() >= deadline) return HandleState::kRunning;
    SleepForCompletions(deadline);
  }
}

absl::StatusOr<ClientImpl::Done> ClientImpl::WaitDone(Handle handle, absl::Duration timeout) {
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
  if (p == pending_.end()) {  // another thread took it meanwhile
    return absl::InvalidArgumentError(
        absl::StrCat("unknown or already consumed handle ", handle.id));
  }
  // The session died with it in flight.
  Pending left = std::move(p->second);
  pending_.erase(p);
  FreeStaging(left);
  return DeadStatus();
}

absl::Status ClientImpl::WaitFor(Handle handle, absl::Duration timeout) {
  auto d = WaitDone(handle, timeout);
  if (!d.ok()) return d.status();
  // The caller wants no output tensor: hand it straight back.
  if (d->status.ok() && d->result_bytes > 0) ReleaseResult(d->result_offset);
  return d->status;
}

absl::StatusOr<HostBuffer> ClientImpl::WaitForOutput(Handle handle) {
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
    auto a = WaitForAlltoall(handle);
    if (!a.ok()) return a.status();
    return std::move(a->output);
  }
  std::vector<int64_t> shape = {d->value};
  shape.insert(shape.end(), d->row_shape.begin(), d->row_shape.end());
  return HostBuffer(arena_, arena_->base + d->result_offset, d->result_bytes, d->dtype,
                    std::move(shape), static_cast<int64_t>(d->result_offset));
}

absl::StatusOr<AlltoallResult> ClientImpl::WaitForAlltoall(Handle handle) {
  auto d = WaitDone(handle, absl::InfiniteDuration());
  if (!d.ok()) return d.status();
  if (!d->status.ok()) return d->status;
  if (!Traits(d->kind).splits) {
    if (d->result_bytes > 0) ReleaseResult(d->result_offset);
    return absl::InvalidArgumentError(
        absl::StrCat(CollectiveKindName(d->kind), " is not an alltoall"));
  }
  auto n = ProcessSetSize(d->process_set);
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
      HostBuffer(arena_, arena_->base + d->result_offset + header, d->result_bytes - header,
                 d->dtype, std::move(shape), static_cast<int64_t>(d->result_offset));
  return out;
}

absl::StatusOr<bool> ClientImpl::Test(Handle handle, absl::Duration timeout) {
  // A handle of a dead session tests done: Wait reports why.
  absl::StatusOr<HandleState> state = AwaitHandle(handle, timeout);
  if (!state.ok()) return state.status();
  return *state != HandleState::kRunning;
}

void ClientImpl::ReleaseResult(uint64_t arena_offset) {
  if (Dead()) return;
  SubmitSlot slot{};
  slot.kind = abi::v1::kReleaseResult;
  slot.input_offset = arena_offset;
  {
    absl::MutexLock l(&submit_mu_);
    for (;;) {
      RingResult r = submit_ring_.TryPush(slot);
      if (r == RingResult::kOk) break;
      if (r == RingResult::kCorrupt || Dead()) return;
      SleepOnDoorbell(
          &header_->submit_space,
          [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return submit_ring_.HasSpace() || Dead(); },
          kMaxSleep, options_.spin);
    }
  }
  RingDoorbell(&header_->submit_ready);
}

}  // namespace kolo
