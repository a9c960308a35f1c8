#include "client/session.h"

#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/futex.h"
#include "common/grpc_status.h"
#include "common/handoff.h"
#include "common/random_id.h"
#include "common/start_thread.h"

namespace kolo {
namespace {

// A stop renders and sends up to a few hundred megabytes of trace.
constexpr absl::Duration kTimelineCallTimeout = absl::Seconds(120);
// How long a detach waits for kolod to release the rank and end the stream.
constexpr absl::Duration kDetachWait = absl::Seconds(2);

}  // namespace

absl::Status Session::Attach(const SharedSegment& segment, abi::v1::SegmentHeader* header) {
  header_ = header;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  // A stopped timeline comes back as one message of any size.
  args.SetMaxReceiveMessageSize(-1);
  channel_ = grpc::CreateCustomChannel("unix:" + options_.socket_path,
                                       grpc::InsecureChannelCredentials(), args);
  if (!channel_->WaitForConnected(std::chrono::system_clock::now() +
                                  absl::ToChronoNanoseconds(options_.connect_timeout))) {
    return absl::UnavailableError(
        absl::StrCat("no kolod is answering on ", options_.socket_path,
                     " (start kolod --socket PATH, set KOLO_SOCKET, or run under kolorun)"));
  }
  // kolod learns who this process is, and receives its segment, from the
  // kernel over the handoff socket; the attach presents the ticket.
  auto ticket =
      HandOff(HandoffSocketPath(options_.socket_path), segment.fd(), options_.connect_timeout);
  if (!ticket.ok()) {
    return absl::Status(ticket.status().code(),
                        absl::StrCat("attach to kolod at ", options_.socket_path, " as rank ",
                                     options_.rank, ": ", ticket.status().message()));
  }
  attach_context_.AddMetadata(kHandoffMetadata, *ticket);
  stub_ = kolo::v1::Node::NewStub(channel_);
  stream_ = stub_->Attach(&attach_context_);
  kolo::v1::DaemonMessage reply;
  if (!stream_->Write(Hello(segment.size())) || !stream_->Read(&reply) || !reply.has_attached()) {
    grpc::Status s = stream_->Finish();
    absl::Status err = FromGrpcStatus(s);
    if (err.ok()) err = absl::UnavailableError("kolod ended the attach");
    return absl::Status(err.code(), absl::StrCat("attach to kolod at ", options_.socket_path,
                                                 " as rank ", options_.rank, ": ", err.message()));
  }
  if (absl::Status s = Attached(reply.attached()); !s.ok()) return s;
  // A thread the system refuses fails the attach, as any other error does
  // (the caller's Close then ends the session).
  absl::StatusOr<std::thread> watcher =
      StartThread("the session's stream watcher", "kolo-watch", [this] { WatchStream(); });
  if (!watcher.ok()) return watcher.status();
  watcher_ = std::move(*watcher);
  return absl::OkStatus();
}

kolo::v1::ClientMessage Session::Hello(uint64_t shm_bytes) {
  kolo::v1::ClientMessage hello;
  auto* a = hello.mutable_attach();
  a->set_job_id(options_.job_id);
  a->set_job_token(options_.job_token);
  a->set_rank(options_.rank);
  a->set_size(options_.size);
  a->set_local_rank(options_.local_rank);
  a->set_local_size(options_.local_size);
  a->set_coordinator(options_.coordinator);
  a->set_shm_bytes(shm_bytes);
  a->set_shm_abi_version(abi::v1::kVersion);
  if (options_.caller_memory && options_.local_size == options_.size &&
      options_.coordinator.empty()) {
    // kolod proves it can reach this process's memory by reading these
    // random bytes where they are.
    const std::string probe = RandomHex(static_cast<int>(caller_memory_probe_.size() / 2));
    std::memcpy(caller_memory_probe_.data(), probe.data(), caller_memory_probe_.size());
    a->set_caller_memory_probe_address(reinterpret_cast<uint64_t>(caller_memory_probe_.data()));
    a->set_caller_memory_probe(std::string(
        reinterpret_cast<const char*>(caller_memory_probe_.data()), caller_memory_probe_.size()));
  }
  const ClientOptions::JobSettings& job = options_.job;
  kolo::v1::JobSettings* settings = a->mutable_settings();
  if (job.fusion_threshold_bytes) settings->set_fusion_threshold_bytes(*job.fusion_threshold_bytes);
  if (job.cache_capacity) settings->set_cache_capacity(*job.cache_capacity);
  if (job.autotune) {
    kolo::v1::AutotuneSettings* tune = settings->mutable_autotune();
    tune->set_enabled(true);
    tune->set_warmup_samples(job.autotune_warmup_samples);
    tune->set_steps_per_sample(job.autotune_steps_per_sample);
    tune->set_max_samples(job.autotune_max_samples);
    tune->set_gaussian_process_noise(job.autotune_noise);
  }
  if (options_.elastic.enabled) {
    auto* e = a->mutable_elastic();
    e->set_enabled(true);
    e->set_min_size(options_.elastic.min_size);
    e->set_max_size(options_.elastic.max_size);
    e->set_joiner(options_.elastic.joiner);
    e->set_previous_rank(options_.elastic.previous_rank);
    e->set_previous_epoch(options_.elastic.previous_epoch);
  }
  return hello;
}

absl::Status Session::Attached(const kolo::v1::AttachResponse& r) {
  session_id_ = r.session_id();
  caller_memory_ = r.caller_memory();
  tensor_parts_ = r.tensor_parts();
  if (const std::optional<uint64_t>& asked = options_.job.fusion_threshold_bytes;
      asked && *asked > r.fusion_threshold_bytes()) {
    options_.env_notes.push_back(absl::StrCat(
        "the fusion threshold of ", *asked, " bytes is above kolod's bound: the job fuses up to ",
        r.fusion_threshold_bytes(), " bytes (kolod --fusion_threshold)"));
  }
  if (!options_.elastic.enabled) return absl::OkStatus();
  // kolod numbered this rank when the epoch formed.
  if (r.size() < 1 || r.rank() < 0 || r.rank() >= r.size() || r.local_size() < 1 ||
      r.local_rank() < 0 || r.local_rank() >= r.local_size() || r.epoch() == 0) {
    return absl::InternalError(absl::StrCat("kolod assigned rank ", r.rank(), " of ", r.size(),
                                            " in epoch ", r.epoch(), ": not a seat"));
  }
  options_.rank = r.rank();
  options_.size = r.size();
  options_.local_rank = r.local_rank();
  options_.local_size = r.local_size();
  epoch_ = r.epoch();
  return absl::OkStatus();
}

void Session::WatchStream() {
  kolo::v1::DaemonMessage msg;
  absl::Status event;
  while (stream_->Read(&msg)) {
    if (msg.has_event() && event.ok()) {
      event =
          absl::Status(static_cast<absl::StatusCode>(msg.event().code()), msg.event().message());
    }
  }
  grpc::Status end = stream_->Finish();
  absl::Status why = event;
  if (why.ok()) {
    why = absl::UnavailableError(
        absl::StrCat("lost kolod at ", options_.socket_path, ": ",
                     end.ok() ? "it ended the session" : end.error_message()));
  }
  dead_status_ = std::move(why);
  dead_.store(true, std::memory_order_release);
  stream_ended_.Notify();
  // Wake every waiter of this process; they find the session dead.
  header_->completion_ready.seq.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&header_->completion_ready.seq);
  header_->submit_space.seq.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&header_->submit_space.seq);
}

bool Session::Dead() const {
  return dead_.load(std::memory_order_acquire) ||
         header_->session_state.load(std::memory_order_acquire) != abi::v1::kSessionOpen;
}

absl::Status Session::DeadStatus() const {
  if (dead_.load(std::memory_order_acquire)) return dead_status_;
  return absl::UnavailableError(
      absl::StrCat("kolod at ", options_.socket_path, " closed the session"));
}

void Session::Close(bool rejoin) {
  absl::MutexLock l(&close_mu_);
  if (closed_) return;
  closed_ = true;
  if (stub_ != nullptr && !dead_.load()) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    kolo::v1::DetachRequest req;
    req.set_session_id(session_id_);
    req.set_rejoin(rejoin);
    kolo::v1::DetachResponse resp;
    // kolod ends the stream once it has released the rank, so that an
    // init that follows at once finds the rank free; a kolod that does not
    // answer in time is cut off.
    if (stub_->Detach(&ctx, req, &resp).ok() && stream_ != nullptr && watcher_.joinable() &&
        stream_->WritesDone()) {
      (void)stream_ended_.WaitForNotificationWithTimeout(kDetachWait);
    }
  }
  if (stream_ != nullptr) attach_context_.TryCancel();
  if (watcher_.joinable()) watcher_.join();
}

absl::StatusOr<Client::ElasticStatus> Session::GetElasticStatus() const {
  if (Dead()) return DeadStatus();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  kolo::v1::ElasticStatusRequest req;
  req.set_session_id(session_id_);
  kolo::v1::ElasticStatusResponse resp;
  if (grpc::Status s = stub_->ElasticStatus(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  Client::ElasticStatus out;
  out.epoch = resp.epoch();
  out.current_epoch = resp.current_epoch();
  out.joiners_waiting = resp.joiners_waiting();
  return out;
}

absl::StatusOr<kolo::v1::JobAutotuneResponse> Session::JobAutotune(uint32_t since) const {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  kolo::v1::JobAutotuneRequest req;
  req.set_session_id(session_id_);
  req.set_since(since);
  kolo::v1::JobAutotuneResponse resp;
  if (grpc::Status s = stub_->JobAutotune(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::StatusOr<kolo::v1::JobTimelineResponse> Session::JobTimeline(
    kolo::v1::JobTimelineRequest::Action action, uint64_t max_events) {
  if (Dead()) return DeadStatus();
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kTimelineCallTimeout));
  kolo::v1::JobTimelineRequest req;
  req.set_session_id(session_id_);
  req.set_action(action);
  req.set_max_events(max_events);
  kolo::v1::JobTimelineResponse resp;
  if (grpc::Status s = stub_->JobTimeline(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::Status Session::StartTimeline(uint64_t max_events) {
  return JobTimeline(kolo::v1::JobTimelineRequest::START, max_events).status();
}

absl::StatusOr<TimelineTrace> Session::StopTimeline() {
  auto resp = JobTimeline(kolo::v1::JobTimelineRequest::STOP, 0);
  if (!resp.ok()) return resp.status();
  return TimelineTrace{std::move(*resp->mutable_trace_json()), resp->events(), resp->dropped()};
}

}  // namespace kolo
