// Session: libkolo's session with kolod and its liveness — the channel, the
// Attach stream and the thread that watches it, the options kolod settled
// at attach (an elastic job's seat), whether the session died and why, the
// unary calls on the session (elastic status, timeline) and Close.
//
// Thread-safety: thread-safe. Attach runs once, before any other call, and
// writes the options and what kolod offered; they are read-only after. The
// watcher thread writes dead_status_ once and then publishes dead_ (release;
// readers acquire), so no mutex guards it. close_mu_ serialises Close and is
// held while it waits for the stream's end and joins the watcher; no other
// lock is taken under it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/shared_segment.h"
#include "kolo/kolo.h"
#include "proto/kolo/abi/shm_abi_v1.h"
#include "proto/kolo/v1/node.grpc.pb.h"

namespace kolo {

class Session {
 public:
  explicit Session(const ClientOptions& options) : options_(options) {}
  ~Session() { Close(/*rejoin=*/false); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Attaches to kolod, handing it `segment` (whose header is `header`), and
  // starts the watcher.
  absl::Status Attach(const SharedSegment& segment, abi::v1::SegmentHeader* header);
  // Detaches (telling kolod whether the rank `rejoin`s the next epoch of an
  // elastic job), ends the stream and joins the watcher. Idempotent.
  void Close(bool rejoin);

  const ClientOptions& options() const { return options_; }
  const std::string& session_id() const { return session_id_; }
  uint64_t epoch() const { return epoch_; }
  // kolod reads and writes this process's memory (caller memory).
  bool caller_memory() const { return caller_memory_; }
  // kolod takes tensors in parts.
  bool tensor_parts() const { return tensor_parts_; }

  // Whether the stream ended or kolod closed the session, and why.
  bool Dead() const;
  absl::Status DeadStatus() const;

  absl::StatusOr<Client::ElasticStatus> GetElasticStatus() const;
  absl::Status StartTimeline(uint64_t max_events);
  absl::StatusOr<TimelineTrace> StopTimeline();
  // The job's fusion tuner on this kolod: its samples from index `since`.
  absl::StatusOr<kolo::v1::JobAutotuneResponse> JobAutotune(uint32_t since) const;

 private:
  // The attach message: who this rank is, and what it offers.
  kolo::v1::ClientMessage Hello(uint64_t shm_bytes);
  // Takes kolod's answer: the session, what it offers, an elastic seat.
  absl::Status Attached(const kolo::v1::AttachResponse& r);
  // The watcher thread: reads the stream until it ends, then marks the
  // session dead and wakes every sleeper of this process.
  void WatchStream();
  absl::StatusOr<kolo::v1::JobTimelineResponse> JobTimeline(
      kolo::v1::JobTimelineRequest::Action action, uint64_t max_events);

  ClientOptions options_;  // written once, by Attach (an elastic seat), before any use
  abi::v1::SegmentHeader* header_ = nullptr;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<kolo::v1::Node::Stub> stub_;
  grpc::ClientContext attach_context_;
  std::unique_ptr<grpc::ClientReaderWriter<kolo::v1::ClientMessage, kolo::v1::DaemonMessage>>
      stream_;
  std::string session_id_;
  uint64_t epoch_ = 0;  // elastic jobs
  // Caller memory: offered by kolod at attach, and the probe it read.
  bool caller_memory_ = false;
  bool tensor_parts_ = false;  // kolod takes tensors in parts (AttachResponse)
  std::array<uint8_t, 16> caller_memory_probe_{};
  std::thread watcher_;
  // Notified when the watcher saw the stream end: after a detach, once
  // kolod released this session's rank (see Close).
  absl::Notification stream_ended_;

  absl::Mutex close_mu_;
  bool closed_ ABSL_GUARDED_BY(close_mu_) = false;

  std::atomic<bool> dead_{false};
  absl::Status dead_status_;  // written by the watcher before dead_ is set
};

}  // namespace kolo
