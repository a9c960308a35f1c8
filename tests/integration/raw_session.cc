#include "tests/integration/raw_session.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "common/futex.h"
#include "common/handoff.h"
#include "gtest/gtest.h"
#include "proto/kolo/abi/types.h"

namespace kolo::testing {

abi::v1::SubmitSlot* RawSession::slots() {
  return reinterpret_cast<abi::v1::SubmitSlot*>(segment.data() + header->submit_offset);
}

abi::v1::CompletionSlot RawSession::PopCompletion(absl::Time deadline) {
  abi::v1::CompletionSlot out{};
  auto* ring =
      reinterpret_cast<abi::v1::CompletionSlot*>(segment.data() + header->completion_offset);
  for (;;) {
    uint64_t head = header->completion_head.value.load();
    if (head != header->completion_tail.value.load()) {
      std::memcpy(&out, &ring[head % kRawCompletionCap], sizeof(out));
      header->completion_head.value.store(head + 1);
      return out;
    }
    if (absl::Now() >= deadline) return out;
    absl::SleepFor(absl::Milliseconds(5));  // polls a ring with a deadline
  }
}

void RawSession::Push(const abi::v1::SubmitSlot& s) {
  uint64_t tail = header->submit_tail.value.load();
  std::memcpy(&slots()[tail % kRawSubmitCap], &s, sizeof(s));
  header->submit_tail.value.store(tail + 1);
  RingDoorbell(&header->submit_ready);
}

bool RawSession::PushWhenRoom(const abi::v1::SubmitSlot& s, absl::Time deadline) {
  while (header->submit_tail.value.load() - header->submit_head.value.load() >= kRawSubmitCap) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));  // waits for kolod to drain the ring
  }
  Push(s);
  return true;
}

kolo::v1::JobEvent RawSession::ReadUntilEnd() {
  kolo::v1::DaemonMessage m;
  kolo::v1::JobEvent event;
  while (stream->Read(&m)) {
    if (m.has_event()) event = m.event();
  }
  stream->Finish();
  return event;
}

std::unique_ptr<RawSession> RawAttach(const std::shared_ptr<grpc::Channel>& channel,
                                      const std::string& socket_path,
                                      const RawAttachOptions& options,
                                      kolo::v1::DaemonMessage* reply, bool* ok) {
  auto s = std::make_unique<RawSession>();
  auto layout = abi::v1::ComputeLayout(kRawSubmitCap, kRawCompletionCap, kRawArena);
  s->segment = *SharedSegment::Create(layout.total_bytes);
  // A well-formed header (no result area); the tests corrupt what they need.
  s->header =
      abi::v1::InitSegmentHeader(s->segment.data(), kRawSubmitCap, kRawCompletionCap, kRawArena, 0);
  if (options.hand_off) {
    auto ticket = HandOff(HandoffSocketPath(socket_path), s->segment.fd(), absl::Seconds(10));
    if (ticket.ok()) s->context.AddMetadata(kHandoffMetadata, *ticket);
  } else if (!options.forged_ticket.empty()) {
    s->context.AddMetadata(kHandoffMetadata, options.forged_ticket);
  }
  s->stub = kolo::v1::Node::NewStub(channel);
  s->stream = s->stub->Attach(&s->context);
  kolo::v1::ClientMessage m;
  auto* a = m.mutable_attach();
  a->set_job_id(options.job_id);
  a->set_job_token(options.token);
  a->set_rank(options.rank);
  a->set_size(options.size);
  a->set_local_rank(options.rank);
  a->set_local_size(options.size);
  a->set_shm_bytes(s->segment.size());
  a->set_shm_abi_version(abi::v1::kVersion);
  if (options.mutate) options.mutate(s->header, a);
  s->stream->Write(m);
  *ok = s->stream->Read(reply) && reply->has_attached();
  return s;
}

void ExpectAttachRefused(const std::shared_ptr<grpc::Channel>& channel,
                         const std::string& socket_path, const RawAttachOptions& options,
                         grpc::StatusCode code, const std::string& text) {
  kolo::v1::DaemonMessage reply;
  bool ok = true;
  auto s = RawAttach(channel, socket_path, options, &reply, &ok);
  EXPECT_FALSE(ok);
  grpc::Status st = s->stream->Finish();
  EXPECT_EQ(st.error_code(), code) << st.error_message();
  EXPECT_TRUE(absl::StrContains(st.error_message(), text)) << st.error_message();
}

void ExpectDaemonServesAJob(const DaemonProcess& daemon, const std::string& job) {
  ASSERT_TRUE(daemon.Alive());
  auto ranks = Ranks::Start(daemon.socket_path(), job, 2, {kTestRankPath, "duplicate"});
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  for (const auto& r : ranks->Wait(absl::Seconds(60))) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
}

std::string IdentityTicket(const std::string& socket_path) {
  auto ticket = HandOff(HandoffSocketPath(socket_path), -1, absl::Seconds(10));
  return ticket.ok() ? *ticket : "";
}

abi::v1::SubmitSlot AllreduceSlot(uint64_t request_id, const std::string& name) {
  abi::v1::SubmitSlot slot{};
  slot.request_id = request_id;
  slot.kind = static_cast<uint32_t>(CollectiveKind::kAllreduce);
  slot.dtype = static_cast<uint32_t>(DType::kFloat32);
  slot.ndim = 1;
  slot.shape[0] = 16;
  slot.byte_length = 64;
  slot.name_length = static_cast<uint32_t>(std::min(name.size(), sizeof(slot.name)));
  std::memcpy(slot.name, name.data(), slot.name_length);
  return slot;
}

}  // namespace kolo::testing
