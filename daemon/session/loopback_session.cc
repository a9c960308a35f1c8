#include "daemon/session/loopback_session.h"

#include <unistd.h>

#include <algorithm>
#include <new>

#include "absl/strings/str_cat.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo::daemon {
namespace {

constexpr uint32_t kSubmitCapacity = 64;
constexpr uint32_t kCompletionCapacity = 256;
constexpr uint64_t kArenaBytes = 4096;

}  // namespace

absl::StatusOr<std::unique_ptr<LoopbackSession>> LoopbackSession::Create(const std::string& job_id,
                                                                         int rank,
                                                                         uint64_t result_bytes) {
  const uint64_t results = abi::v1::AlignUp(result_bytes);
  const uint64_t arena = abi::v1::AlignUp(kArenaBytes) + results;
  abi::v1::Layout layout = abi::v1::ComputeLayout(kSubmitCapacity, kCompletionCapacity, arena);
  auto segment = SharedSegment::Create(layout.total_bytes);
  if (!segment.ok()) return segment.status();
  std::unique_ptr<LoopbackSession> s(new LoopbackSession());
  s->segment_ = std::move(*segment);
  uint8_t* base = s->segment_.data();
  abi::v1::InitSegmentHeader(base, kSubmitCapacity, kCompletionCapacity, arena, results);
  SessionIdentity identity;
  identity.session_id = absl::StrCat("loopback-", job_id, "-", rank);
  identity.job_id = job_id;
  identity.rank = rank;
  identity.pid = getpid();
  identity.uid = getuid();
  auto session = Session::Open(std::move(identity), UniqueFd(dup(s->segment_.fd())),
                               layout.total_bytes, SessionLimits{});
  if (!session.ok()) return session.status();
  s->session_ = std::move(*session);
  // The segment is mapped twice in this process: here, and by the Session.
  // Completions are read through the Session's mapping, the addresses its
  // pushes (and the results written before them) use, so that the ring's
  // release and acquire fall on one address and ThreadSanitizer sees the
  // order they give. (Two processes, as in production, are beyond TSan.)
  uint8_t* session_view = s->session_->arena_base() - layout.arena_offset;
  auto* header = reinterpret_cast<abi::v1::SegmentHeader*>(session_view);
  s->completions_ = SpscRing<abi::v1::CompletionSlot>(
      &header->completion_tail, &header->completion_head,
      reinterpret_cast<abi::v1::CompletionSlot*>(session_view + layout.completion_offset),
      kCompletionCapacity);
  return s;
}

std::vector<ReceivedCompletion> LoopbackSession::TakeCompletions() {
  std::vector<ReceivedCompletion> out;
  abi::v1::CompletionSlot slot;
  while (completions_.TryPop(&slot) == RingResult::kOk) {
    ReceivedCompletion c;
    c.request_id = slot.request_id;
    c.code = static_cast<absl::StatusCode>(slot.code);
    c.message.assign(slot.message,
                     std::min<size_t>(slot.message_length, abi::v1::kMaxMessageBytes));
    c.result_offset = slot.result_offset;
    c.result_bytes = slot.result_bytes;
    c.value = slot.value;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace kolo::daemon
