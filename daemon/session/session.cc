#include "daemon/session/session.h"

#include <sched.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/futex.h"
#include "common/start_thread.h"
#include "daemon/session/segment_check.h"
#include "daemon/session/slot_validator.h"

namespace kolo::daemon {
namespace {

using abi::v1::CompletionSlot;
using abi::v1::SegmentHeader;
using abi::v1::SubmitSlot;

}  // namespace

absl::StatusOr<std::shared_ptr<Session>> Session::Open(SessionIdentity identity, UniqueFd shm_fd,
                                                       uint64_t shm_bytes,
                                                       const SessionLimits& limits) {
  if (shm_bytes < sizeof(SegmentHeader) || shm_bytes > limits.max_segment_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment of ", shm_bytes, " bytes; allowed up to ", limits.max_segment_bytes));
  }
  auto segment = SharedSegment::Adopt(std::move(shm_fd), shm_bytes);
  if (!segment.ok()) return segment.status();
  // Copy the header's sizes before checking so the client cannot change them
  // between the check and their use.
  SegmentHeader copy;
  std::memcpy(static_cast<void*>(&copy), segment->data(), sizeof(copy));
  absl::Status ok = CheckSegmentHeader(copy, shm_bytes, limits);
  if (!ok.ok()) return ok;
  auto session =
      std::shared_ptr<Session>(new Session(std::move(identity), std::move(*segment), limits));
  uint8_t* base = session->segment_.data();
  session->arena_base_ = base + copy.arena_offset;
  session->arena_bytes_ = copy.arena_bytes;
  session->result_begin_ = copy.arena_bytes - copy.result_bytes;
  {
    absl::MutexLock l(&session->result_mu_);
    session->results_ = std::make_unique<ArenaAllocator>(copy.result_bytes, 64);
  }
  session->submit_ring_ = SpscRing<SubmitSlot>(
      &session->header_->submit_tail, &session->header_->submit_head,
      reinterpret_cast<SubmitSlot*>(base + copy.submit_offset), copy.submit_capacity);
  {
    absl::MutexLock l(&session->completion_mu_);
    session->completion_ring_ = SpscRing<CompletionSlot>(
        &session->header_->completion_tail, &session->header_->completion_head,
        reinterpret_cast<CompletionSlot*>(base + copy.completion_offset), copy.completion_capacity);
  }
  return session;
}

Session::Session(SessionIdentity identity, SharedSegment segment, const SessionLimits& limits)
    : identity_(std::move(identity)),
      limits_(limits),
      segment_(std::move(segment)),
      header_(reinterpret_cast<SegmentHeader*>(segment_.data())) {}

Session::~Session() { Close(); }

absl::Status Session::Start(std::shared_ptr<RequestSink> job,
                            std::function<void(const absl::Status&)> on_failure) {
  job_ = std::move(job);
  job_size_ = job_->size();
  group_ = job_->ingress_group();
  if (group_ == nullptr) {
    own_group_ = std::make_unique<IngressGroup>();
    group_ = own_group_.get();
  }
  group_->Add(this);
  {
    absl::MutexLock l(&failure_mu_);
    on_failure_ = std::move(on_failure);
  }
  absl::StatusOr<std::thread> ingress =
      StartThread(absl::StrCat("the session of rank ", identity_.rank), "kolo-ingress",
                  [this] { IngressLoop(); });
  if (!ingress.ok()) {
    group_->Remove(this);
    return ingress.status();
  }
  ingress_ = std::move(*ingress);
  return absl::OkStatus();
}

void Session::Close() {
  if (closed_.exchange(true)) return;
  stop_.store(true, std::memory_order_release);
  {
    absl::MutexLock l(&failure_mu_);
    on_failure_ = nullptr;
  }
  // Wake the ingress thread if it sleeps on the doorbell or on the group.
  header_->submit_ready.seq.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&header_->submit_ready.seq);
  if (group_ != nullptr) group_->Wake();
  if (ingress_.joinable()) {
    if (ingress_.get_id() == std::this_thread::get_id()) {
      ingress_.detach();  // cannot happen: Close runs on the Attach handler
    } else {
      ingress_.join();
    }
  }
  // After this no thread of the job reads this ring or uses job_ for it.
  if (group_ != nullptr) group_->Remove(this);
  // Requests still in flight hold this session; they must not keep the job
  // alive too, or the job could end up destroyed on one of its own threads
  // (a multi-node job's executor) when the last of them is released.
  job_.reset();
  header_->session_state.store(abi::v1::kSessionClosed, std::memory_order_release);
  header_->completion_ready.seq.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&header_->completion_ready.seq);
  header_->submit_space.seq.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&header_->submit_space.seq);
}

void Session::Fail(const absl::Status& status) {
  stop_.store(true, std::memory_order_release);
  absl::MutexLock l(&failure_mu_);
  if (on_failure_) on_failure_(status);
}

void Session::IngressLoop() {
  while (!stop_.load(std::memory_order_acquire)) {
    if (group_->TryLead()) {
      Lead();
      group_->Resign();
    } else if (group_->led()) {
      // The leader polls this ring too; sleep until it resigns.
      group_->WaitWhileLed(absl::Seconds(1));
      continue;
    }
    // No leader: this thread watches its own ring. Activity makes it try to
    // lead (and spin) on the next turn.
    if (Poll() > 0) continue;
    SleepOnDoorbell(
        &header_->submit_ready,
        [this] { return submit_ring_.HasData() || stop_.load(std::memory_order_acquire); },
        absl::Seconds(1), absl::ZeroDuration());
  }
}

void Session::Lead() {
  // Looks at the rings this many times (a pause apart) between yields.
  constexpr int kLooksPerYield = 16;
  absl::Time last_activity = absl::Now();
  while (!stop_.load(std::memory_order_acquire)) {
    if (group_->PollAll(kLooksPerYield) > 0) {
      last_activity = absl::Now();
      continue;
    }
    if (absl::Now() - last_activity >= limits_.spin) return;
    // Yield the core between bursts of looks: on a node with fewer cores
    // than busy threads the ranks this thread waits for still get to run.
    sched_yield();
  }
}

int Session::Poll() {
  bool idle = false;
  if (!polling_.compare_exchange_strong(idle, true, std::memory_order_acquire)) return 0;
  const int read = stop_.load(std::memory_order_acquire) ? 0 : Drain();
  polling_.store(false, std::memory_order_release);
  return read;
}

int Session::Drain() {
  const ArenaBounds arena{arena_base_, arena_bytes_, caller_memory_ != nullptr};
  int popped = 0;
  for (;;) {
    SubmitSlot slot;
    RingResult r = submit_ring_.TryPop(&slot);
    if (r == RingResult::kEmptyOrFull) break;
    if (r == RingResult::kCorrupt) {
      Fail(absl::InvalidArgumentError(
          absl::StrCat("rank ", identity_.rank, " corrupted its submission ring indices")));
      break;
    }
    ++popped;
    if (slot.kind == abi::v1::kReleaseResult) {
      ReleaseResult(slot.input_offset);
      continue;
    }
    auto request = ValidateSlot(slot, arena, job_size_);
    if (!request.ok()) {
      Fail(absl::InvalidArgumentError(absl::StrCat(
          "rank ", identity_.rank, " sent a malformed request: ", request.status().message())));
      break;
    }
    request->rank = identity_.rank;
    // Another session's thread may poll this ring while this session is
    // being destroyed (its Close then waits for the poll to end).
    request->origin = weak_from_this().lock();
    if (request->origin == nullptr) break;
    if ((slot.flags & abi::v1::kSlotFlagCallerMemory) != 0) request->caller = caller_memory_;
    request->submitted_at = absl::Now();
    submitted_.fetch_add(1, std::memory_order_relaxed);
    job_->Accept(*std::move(request));
    if (stop_.load(std::memory_order_acquire)) break;
  }
  if (popped > 0) {
    RingDoorbell(&header_->submit_space);
    // Names that this batch made ready are planned together (and fused).
    job_->Progress();
  }
  return popped;
}

void Session::Complete(absl::Span<const Completion> completions) {
  if (completions.empty()) return;
  bool broken = false;
  {
    absl::MutexLock l(&completion_mu_);
    if (completion_broken_) return;
    for (const Completion& c : completions) {
      CompletionSlot slot{};
      slot.request_id = c.request_id;
      slot.code = static_cast<int32_t>(c.status.code());
      slot.result_offset = c.result_offset;
      slot.result_bytes = c.result_bytes;
      slot.value = c.value;
      absl::string_view msg = c.status.message();
      slot.message_length =
          static_cast<uint32_t>(std::min<size_t>(msg.size(), abi::v1::kMaxMessageBytes));
      // An OK status's message is empty with a null data(): memcpy may not
      // be handed a null pointer, even for zero bytes.
      if (slot.message_length > 0) std::memcpy(slot.message, msg.data(), slot.message_length);
      if (completion_ring_.TryPush(slot) != RingResult::kOk) {
        // The client keeps at most completion_capacity requests in flight,
        // so a full ring means it broke the protocol.
        completion_broken_ = true;
        broken = true;
        break;
      }
      completed_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  RingDoorbell(&header_->completion_ready);
  if (broken) {
    Fail(absl::InvalidArgumentError(absl::StrCat(
        "rank ", identity_.rank, " overflowed its completion ring (too many requests in flight)")));
  }
}

}  // namespace kolo::daemon

namespace kolo::daemon {

absl::StatusOr<uint64_t> Session::AllocateResult(uint64_t bytes) {
  absl::MutexLock l(&result_mu_);
  auto offset = results_->Allocate(bytes);
  if (!offset.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rank ", identity_.rank, ": result area full (", bytes, " bytes wanted, ",
                     results_->capacity() - results_->bytes_in_use(), " of ", results_->capacity(),
                     " free; raise KOLO_RESULT_BYTES or free results sooner)"));
  }
  return result_begin_ + *offset;
}

void Session::ReleaseResult(uint64_t arena_offset) {
  if (arena_offset < result_begin_) return;
  absl::MutexLock l(&result_mu_);
  results_->Free(arena_offset - result_begin_);
}

}  // namespace kolo::daemon
