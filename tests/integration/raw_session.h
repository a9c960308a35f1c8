// A hand-made client session for tests that play a broken or hostile client
// against a real kolod: the segment, the handoff, and the raw Attach stream.
//
// Thread-safety: not thread-safe; one test thread drives a session.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "common/shared_segment.h"
#include "proto/kolo/abi/shm_abi_v1.h"
#include "proto/kolo/v1/node.grpc.pb.h"
#include "tests/integration/harness.h"

namespace kolo::testing {

inline constexpr uint32_t kRawSubmitCap = 16;
inline constexpr uint32_t kRawCompletionCap = 16;
inline constexpr uint64_t kRawArena = 1 << 20;

struct RawSession {
  // Ends the stream if it is still open.
  ~RawSession() {
    if (stream != nullptr) context.TryCancel();
  }

  SharedSegment segment;
  abi::v1::SegmentHeader* header = nullptr;
  grpc::ClientContext context;
  std::unique_ptr<kolo::v1::Node::Stub> stub;
  std::unique_ptr<grpc::ClientReaderWriter<kolo::v1::ClientMessage, kolo::v1::DaemonMessage>>
      stream;

  abi::v1::SubmitSlot* slots();
  // The next completion, or a CompletionSlot with request_id 0 if none
  // arrives by `deadline`.
  abi::v1::CompletionSlot PopCompletion(absl::Time deadline);
  // Pushes one slot (the caller keeps within the ring's capacity).
  void Push(const abi::v1::SubmitSlot& s);
  // Pushes one slot once the ring has room; false if none came by `deadline`.
  bool PushWhenRoom(const abi::v1::SubmitSlot& s, absl::Time deadline);
  // Reads until kolod ends the stream; returns the event it sent.
  kolo::v1::JobEvent ReadUntilEnd();
};

struct RawAttachOptions {
  std::string job_id;
  int rank = 0;
  int size = 1;
  std::string token = kTestJobToken;
  // Hands the segment over first (as the client library does) and sends
  // the ticket; without it the call carries no ticket.
  bool hand_off = true;
  // Sent instead of the real ticket when not empty.
  std::string forged_ticket;
  std::function<void(abi::v1::SegmentHeader*, kolo::v1::AttachRequest*)> mutate;
};

// Attaches over `channel` to the kolod serving `socket_path`; the first reply
// is read into `reply`, and `ok` says whether it was an AttachResponse.
std::unique_ptr<RawSession> RawAttach(const std::shared_ptr<grpc::Channel>& channel,
                                      const std::string& socket_path,
                                      const RawAttachOptions& options,
                                      kolo::v1::DaemonMessage* reply, bool* ok);

// Attaches with `options` and expects kolod to refuse with `code`, saying
// `text` (gtest expectations).
void ExpectAttachRefused(const std::shared_ptr<grpc::Channel>& channel,
                         const std::string& socket_path, const RawAttachOptions& options,
                         grpc::StatusCode code, const std::string& text);

// Expects the kolod `daemon` to be alive and to run a normal two-rank job
// named `job` to success (gtest expectations).
void ExpectDaemonServesAJob(const DaemonProcess& daemon, const std::string& job = "job-after");

// An identity ticket for this process from the kolod at `socket_path`, sent
// as "kolo-handoff" metadata on Status calls ("" if the handoff failed).
std::string IdentityTicket(const std::string& socket_path);

// A well-formed 16-float allreduce slot named `name`.
abi::v1::SubmitSlot AllreduceSlot(uint64_t request_id, const std::string& name);

}  // namespace kolo::testing
