// A client that breaks the contract — bad headers, hostile slots, corrupt
// ring indices — gets a clear error for its own session, and kolod carries on
// serving everyone else. Also checks the Status and health services.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <memory>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "common/futex.h"
#include "common/shared_segment.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "proto/kolo/abi/shm_abi_v1.h"
#include "proto/kolo/abi/types.h"
#include "proto/kolo/v1/node.grpc.pb.h"
#include "proto/kolo/v1/status.grpc.pb.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_session.h"

namespace kolo::testing {
namespace {

using abi::v1::SegmentHeader;
using abi::v1::SubmitSlot;

constexpr uint64_t kArena = kRawArena;

class HostileClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    auto d = DaemonProcess::Start(dir_ + "/kolod.sock");
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_.emplace(std::move(*d));
    channel_ =
        grpc::CreateChannel("unix:" + daemon_->socket_path(), grpc::InsecureChannelCredentials());
  }

  // Attaches as `rank` of a job of `size`; `mutate` may spoil the header
  // or the request first. Returns the session with the first reply read into
  // `reply` (false if the daemon refused).
  std::unique_ptr<RawSession> Attach(
      const std::string& job, int rank, int size, kolo::v1::DaemonMessage* reply, bool* ok,
      const std::function<void(SegmentHeader*, kolo::v1::AttachRequest*)>& mutate = nullptr,
      bool hand_off = true) {
    RawAttachOptions options;
    options.job_id = job;
    options.rank = rank;
    options.size = size;
    options.mutate = mutate;
    options.hand_off = hand_off;
    return RawAttach(channel_, daemon_->socket_path(), options, reply, ok);
  }

  kolo::v1::JobEvent ReadUntilEnd(RawSession& s) { return s.ReadUntilEnd(); }

  void ExpectRefused(const std::function<void(SegmentHeader*, kolo::v1::AttachRequest*)>& mutate,
                     grpc::StatusCode code, const std::string& text, bool hand_off = true) {
    RawAttachOptions options;
    options.job_id = "job-bad";
    options.mutate = mutate;
    options.hand_off = hand_off;
    ExpectAttachRefused(channel_, daemon_->socket_path(), options, code, text);
  }

  void ExpectDaemonServesAJob() { kolo::testing::ExpectDaemonServesAJob(*daemon_); }

  std::string dir_;
  std::optional<DaemonProcess> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(HostileClientTest, BadAttachRequestsAreRefusedWithTheReason) {
  ExpectRefused([](SegmentHeader* h, auto*) { h->magic = 42; }, grpc::StatusCode::INVALID_ARGUMENT,
                "magic");
  ExpectRefused([](SegmentHeader* h, auto*) { h->version = 9; },
                grpc::StatusCode::FAILED_PRECONDITION, "ABI version");
  ExpectRefused([](SegmentHeader* h, auto*) { h->submit_capacity = 3; },
                grpc::StatusCode::INVALID_ARGUMENT, "powers of two");
  ExpectRefused([](SegmentHeader* h, auto*) { h->arena_offset += 4096; },
                grpc::StatusCode::INVALID_ARGUMENT, "layout");
  ExpectRefused([](auto*, kolo::v1::AttachRequest* a) { a->set_shm_bytes(a->shm_bytes() * 2); },
                grpc::StatusCode::INVALID_ARGUMENT, "bytes");
  // Without the handoff, or with a ticket of its own making, a client gets
  // nothing: the segment and identity come from the kernel only.
  ExpectRefused(nullptr, grpc::StatusCode::PERMISSION_DENIED, "handoff ticket",
                /*hand_off=*/false);
  RawAttachOptions forged;
  forged.job_id = "job-forged";
  forged.hand_off = false;
  forged.forged_ticket = std::string(32, 'f');
  ExpectAttachRefused(channel_, daemon_->socket_path(), forged, grpc::StatusCode::PERMISSION_DENIED,
                      "unknown or expired handoff ticket");
  ExpectRefused([](auto*, kolo::v1::AttachRequest* a) { a->set_job_token("short"); },
                grpc::StatusCode::INVALID_ARGUMENT, "at least 32");
  ExpectRefused([](auto*, kolo::v1::AttachRequest* a) { a->set_rank(5); },
                grpc::StatusCode::INVALID_ARGUMENT, "rank 5");
  ExpectRefused([](auto*, kolo::v1::AttachRequest* a) { a->set_job_id("../../etc"); },
                grpc::StatusCode::INVALID_ARGUMENT, "job_id");
  ExpectRefused([](auto*, kolo::v1::AttachRequest* a) { a->set_shm_abi_version(7); },
                grpc::StatusCode::FAILED_PRECONDITION, "ABI");
  ExpectDaemonServesAJob();
}

TEST_F(HostileClientTest, MalformedSlotsFailOnlyThatSession) {
  struct Case {
    const char* what;
    std::function<void(SubmitSlot*)> spoil;
  };
  const std::vector<Case> cases = {
      {"dtype", [](SubmitSlot* s) { s->dtype = 99; }},
      {"outside the arena", [](SubmitSlot* s) { s->input_offset = kArena - 8; }},
      {"byte length", [](SubmitSlot* s) { s->byte_length = 12345; }},
      {"name length", [](SubmitSlot* s) { s->name_length = 5000; }},
      {"dimensions", [](SubmitSlot* s) { s->ndim = 99; }},
      {"negative dimension", [](SubmitSlot* s) { s->shape[0] = -4; }},
      {"collective kind", [](SubmitSlot* s) { s->kind = 77; }},
      {"overflows",
       [](SubmitSlot* s) {
         s->ndim = 3;
         s->shape[0] = s->shape[1] = s->shape[2] = int64_t{1} << 30;
       }},
  };
  for (const Case& c : cases) {
    kolo::v1::DaemonMessage reply;
    bool ok = false;
    auto s =
        Attach(std::string("job-slot-") + std::to_string(&c - cases.data()), 0, 1, &reply, &ok);
    ASSERT_TRUE(ok) << c.what;
    SubmitSlot slot{};
    slot.request_id = 1;
    slot.kind = static_cast<uint32_t>(CollectiveKind::kAllreduce);
    slot.dtype = static_cast<uint32_t>(DType::kFloat32);
    slot.ndim = 1;
    slot.shape[0] = 16;
    slot.byte_length = 64;
    slot.input_offset = slot.output_offset = 0;
    slot.name_length = 1;
    slot.name[0] = 'x';
    c.spoil(&slot);
    s->Push(slot);
    kolo::v1::JobEvent event = ReadUntilEnd(*s);
    EXPECT_EQ(event.code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << c.what;
    EXPECT_TRUE(absl::StrContains(event.message(), c.what)) << event.message();
  }
  ExpectDaemonServesAJob();
}

// A device request with made-up CUDA IPC handles: whether this kolod was
// built without CUDA, runs where no GPU is, or cannot open the handles, the
// request fails with an error of its own, the session stays usable and
// kolod carries on.
TEST_F(HostileClientTest, DeviceRequestKolodCannotServeFailsOnlyThatRequest) {
  kolo::v1::DaemonMessage reply;
  bool ok = false;
  auto s = Attach("job-device", 0, 1, &reply, &ok);
  ASSERT_TRUE(ok);
  SubmitSlot slot{};
  slot.request_id = 11;
  slot.kind = static_cast<uint32_t>(CollectiveKind::kAllreduce);
  slot.dtype = static_cast<uint32_t>(DType::kFloat32);
  slot.ndim = 1;
  slot.shape[0] = 16;
  slot.byte_length = 64;
  std::memcpy(slot.name, "grad/gpu", 8);
  slot.name_length = 8;
  slot.flags = abi::v1::kSlotFlagDevice;
  for (abi::v1::DeviceTensorSlot* t : {&slot.device_input, &slot.device_output}) {
    std::memset(t->memory_handle, 0x5a, sizeof(t->memory_handle));
    std::memset(t->event_handle, 0xa5, sizeof(t->event_handle));
    t->bytes = 64;
    t->device = 0;
  }
  s->Push(slot);
  abi::v1::CompletionSlot done = s->PopCompletion(absl::Now() + absl::Seconds(60));
  ASSERT_EQ(done.request_id, 11u) << "no completion for the device request";
  EXPECT_NE(done.code, 0);
  std::string message(done.message, std::min(done.message_length, abi::v1::kMaxMessageBytes));
  EXPECT_FALSE(message.empty());
  EXPECT_TRUE(absl::StrContains(message, "CUDA") || absl::StrContains(message, "device"))
      << message;
  std::cerr << "device request on this kolod: code " << done.code << ": " << message << "\n";

  // The same session still runs a host allreduce.
  SubmitSlot host{};
  host.request_id = 12;
  host.kind = static_cast<uint32_t>(CollectiveKind::kAllreduce);
  host.dtype = static_cast<uint32_t>(DType::kFloat32);
  host.ndim = 1;
  host.shape[0] = 4;
  host.byte_length = 16;
  std::memcpy(host.name, "grad/host", 9);
  host.name_length = 9;
  s->Push(host);
  done = s->PopCompletion(absl::Now() + absl::Seconds(60));
  EXPECT_EQ(done.request_id, 12u);
  EXPECT_EQ(done.code, 0) << std::string(done.message, done.message_length);
  ExpectDaemonServesAJob();
}

TEST_F(HostileClientTest, CorruptRingIndicesFailOnlyThatSession) {
  kolo::v1::DaemonMessage reply;
  bool ok = false;
  auto s = Attach("job-ring", 0, 1, &reply, &ok);
  ASSERT_TRUE(ok);
  s->header->submit_tail.value.store(uint64_t{1} << 40);
  RingDoorbell(&s->header->submit_ready);
  kolo::v1::JobEvent event = ReadUntilEnd(*s);
  EXPECT_TRUE(absl::StrContains(event.message(), "corrupted")) << event.message();
  ExpectDaemonServesAJob();
}

TEST_F(HostileClientTest, StatusListsPendingTensorsAndHealthServes) {
  kolo::v1::DaemonMessage reply;
  bool ok = false;
  auto s = Attach("job-status", 0, 2, &reply, &ok);
  ASSERT_TRUE(ok);
  SubmitSlot slot{};
  slot.request_id = 7;
  slot.kind = static_cast<uint32_t>(CollectiveKind::kAllreduce);
  slot.dtype = static_cast<uint32_t>(DType::kFloat32);
  slot.ndim = 1;
  slot.shape[0] = 4;
  slot.byte_length = 16;
  std::memcpy(slot.name, "grad/w1", 7);
  slot.name_length = 7;
  s->Push(slot);

  auto status_stub = kolo::v1::Status::NewStub(channel_);
  kolo::v1::GetStatusResponse resp;
  grpc::Status got;
  const kolo::v1::PendingTensor* seen = nullptr;  // in `resp`
  // Until the status shows the submitted tensor pending (or the call fails).
  WaitUntil(
      [&] {
        grpc::ClientContext ctx;
        ctx.AddMetadata("kolo-handoff", IdentityTicket(daemon_->socket_path()));
        resp.Clear();
        got = status_stub->GetStatus(&ctx, kolo::v1::GetStatusRequest(), &resp);
        if (!got.ok()) return true;
        for (const auto& job : resp.jobs()) {
          for (const auto& p : job.pending()) {
            if (job.job_id() == "job-status" && p.name() == "grad/w1") seen = &p;
          }
        }
        return seen != nullptr;
      },
      absl::Seconds(10), absl::Milliseconds(10));
  ASSERT_TRUE(got.ok()) << got.error_message();
  ASSERT_NE(seen, nullptr) << resp.DebugString();
  EXPECT_EQ(seen->collective(), "allreduce");
  ASSERT_EQ(seen->submitted_ranks_size(), 1);
  EXPECT_EQ(seen->submitted_ranks(0), 0);
  ASSERT_EQ(seen->missing_ranks_size(), 1);
  EXPECT_EQ(seen->missing_ranks(0), 1);
  EXPECT_EQ(resp.node().sessions(), 1);
  EXPECT_EQ(resp.node().pid(), daemon_->pid());

  // grpc.health.v1.Health/Check with an empty request: SERVING is field 1 = 1.
  grpc::GenericStub generic(channel_);
  grpc::ClientContext hctx;
  grpc::Slice empty_message(std::string(""));  // an empty HealthCheckRequest
  grpc::ByteBuffer request(&empty_message, 1);
  grpc::ByteBuffer response;
  grpc::CompletionQueue cq;
  grpc::Status hstatus;
  auto call = generic.PrepareUnaryCall(&hctx, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  call->Finish(&response, &hstatus, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool cq_ok = false;
  ASSERT_TRUE(cq.Next(&tag, &cq_ok));
  ASSERT_TRUE(hstatus.ok()) << hstatus.error_code() << " " << hstatus.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

}  // namespace
}  // namespace kolo::testing
