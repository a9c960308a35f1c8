#include "daemon/session/node_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/handoff.h"
#include "common/job_id.h"
#include "common/random_id.h"
#include "proto/kolo/abi/shm_abi_v1.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

constexpr int kMaxJobSize = 1 << 20;

}  // namespace

absl::Status ValidateAttachRequest(const kolo::v1::AttachRequest& r, const AttachPolicy& policy) {
  if (!ValidJobId(r.job_id())) {
    return absl::InvalidArgumentError("job_id must be 1-128 characters of [A-Za-z0-9._:-]");
  }
  if (r.job_token().size() > 256) {
    return absl::InvalidArgumentError("job_token is longer than 256 bytes");
  }
  if (r.job_token().size() < policy.min_job_token_chars && !policy.allow_weak_job_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", r.job_id(), ": the job token has ", r.job_token().size(),
        " characters; kolod wants at least ", policy.min_job_token_chars,
        " (128 random bits in hex): use kolorun, or set KOLO_JOB_TOKEN to the same random "
        "value for every rank, or leave it unset to use ~/.kolo/job_token"));
  }
  const int max_ranks = std::min(kMaxJobSize, policy.max_job_ranks);
  if (r.size() < 1 || r.size() > max_ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("size ", r.size(), " outside [1, ", max_ranks, "] (kolod --max_job_ranks)"));
  }
  if (r.rank() < 0 || r.rank() >= r.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", r.rank(), " outside [0, ", r.size(), ")"));
  }
  if (r.local_size() < 1 || r.local_size() > r.size() || r.local_rank() < 0 ||
      r.local_rank() >= r.local_size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", r.rank(), ": local rank ",
                                                   r.local_rank(), " of local size ",
                                                   r.local_size(), " in a job of ", r.size()));
  }
  if (r.local_size() > policy.max_sessions_per_uid || r.local_size() > policy.max_sessions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", r.rank(), ": local size ", r.local_size(), " exceeds the sessions this kolod ",
        "allows one user (", std::min(policy.max_sessions_per_uid, policy.max_sessions), ")"));
  }
  if (r.local_size() < r.size() && r.coordinator().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", r.rank(), ": a job spanning nodes (local size ", r.local_size(), " of ", r.size(),
        ") needs the coordinator's peer address (KOLO_COORDINATOR)"));
  }
  if (r.coordinator().size() > 256) {
    return absl::InvalidArgumentError("coordinator address longer than 256 bytes");
  }
  if (r.has_elastic() && r.elastic().enabled()) {
    const kolo::v1::ElasticAttach& e = r.elastic();
    if (e.min_size() < 1 || e.min_size() > max_ranks ||
        (e.max_size() != 0 && (e.max_size() < e.min_size() || e.max_size() > max_ranks))) {
      return absl::InvalidArgumentError(
          absl::StrCat("elastic job ", r.job_id(), ": min size ", e.min_size(), " and max size ",
                       e.max_size(), " (0: no bound) must satisfy 1 <= min <= max <= ", max_ranks));
    }
    if (e.previous_rank() < -1 || e.previous_rank() >= max_ranks) {
      return absl::InvalidArgumentError(absl::StrCat("elastic job ", r.job_id(), ": previous rank ",
                                                     e.previous_rank(), " outside [-1, ", max_ranks,
                                                     ")"));
    }
  }
  if (r.shm_abi_version() != abi::v1::kVersion) {
    return absl::FailedPreconditionError(absl::StrCat("client speaks shared-memory ABI ",
                                                      r.shm_abi_version(), ", kolod speaks ",
                                                      abi::v1::kVersion));
  }
  return absl::OkStatus();
}

absl::StatusOr<NodeService::Admitted> NodeService::Admit(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<kolo::v1::DaemonMessage, kolo::v1::ClientMessage>* stream) {
  // Who calls is known before anything is read: the ticket from the handoff
  // socket comes as metadata, so a call without one costs a lookup only.
  const auto& md = context->client_metadata();
  auto ticket = md.find(kHandoffMetadata);
  if (ticket == md.end() || ticket->second.size() != kHandoffTicketChars) {
    return absl::PermissionDeniedError(
        "attach carries no handoff ticket: attach with the Kolo client library");
  }
  auto handoff =
      handoffs_->Redeem(std::string(ticket->second.data(), ticket->second.size()), absl::Now());
  if (!handoff.ok()) return handoff.status();
  if (!handoff->segment.valid()) {
    return absl::PermissionDeniedError("the handoff ticket carries no session segment");
  }
  const uid_t uid = handoff->caller.uid;
  {
    absl::MutexLock l(&mu_);
    int& mine = pending_attaches_[uid];
    if (mine >= options_.policy.max_pending_attaches) {
      return absl::ResourceExhaustedError(
          absl::StrCat("uid ", uid, " has ", mine, " attaches waiting for their first message"));
    }
    ++mine;
  }
  kolo::v1::ClientMessage first;
  const absl::StatusOr<uint64_t> watch =
      deadlines_.Arm(context, absl::Now() + options_.policy.attach_timeout);
  bool got = false;
  bool late = false;
  if (watch.ok()) {
    got = stream->Read(&first);
    late = deadlines_.Disarm(*watch);
  }
  {
    absl::MutexLock l(&mu_);
    if (--pending_attaches_[uid] == 0) pending_attaches_.erase(uid);
  }
  if (!watch.ok()) return watch.status();
  if (late) {
    return absl::DeadlineExceededError(absl::StrCat(
        "no AttachRequest within ", absl::FormatDuration(options_.policy.attach_timeout)));
  }
  if (!got || !first.has_attach()) {
    return absl::InvalidArgumentError("Attach must start with an AttachRequest");
  }
  Admitted admitted;
  admitted.request = std::move(*first.mutable_attach());
  if (absl::Status s = ValidateAttachRequest(admitted.request, options_.policy); !s.ok()) return s;
  admitted.handoff = std::move(*handoff);
  return admitted;
}

absl::Status NodeService::Reserve(uid_t uid) {
  absl::MutexLock l(&mu_);
  if (reserved_ >= options_.policy.max_sessions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kolod serves ", reserved_, " sessions, its limit (kolod --max_sessions)"));
  }
  int& mine = per_uid_[uid];
  if (mine >= options_.policy.max_sessions_per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat("uid ", uid, " has ", mine,
                                                     " sessions, the limit per user (kolod "
                                                     "--max_sessions_per_uid)"));
  }
  ++mine;
  ++reserved_;
  return absl::OkStatus();
}

void NodeService::Release(uid_t uid) {
  absl::MutexLock l(&mu_);
  --reserved_;
  if (--per_uid_[uid] <= 0) per_uid_.erase(uid);
}

bool NodeService::CallerMemoryProven(const kolo::v1::AttachRequest& req, uid_t caller_uid,
                                     const CallerMemory* memory) const {
  // One-node jobs only: a job spanning nodes moves host tensors through
  // staging buffers of its own (the job refuses caller memory there too).
  // Callers of kolod's own uid only: the kernel then applies the user's own
  // ptrace rule to every access (see caller_memory.h).
  if (!options_.caller_memory || memory == nullptr || caller_uid != options_.caller_memory_uid ||
      req.local_size() != req.size() || !req.coordinator().empty() ||
      req.caller_memory_probe().size() != kCallerMemoryProbeBytes) {
    return false;
  }
  std::string seen(kCallerMemoryProbeBytes, '\0');
  absl::Status read = memory->Read(req.caller_memory_probe_address(), seen.data(), seen.size());
  if (!read.ok()) {
    spdlog::info("job {} rank {}: no caller memory: {}", req.job_id(), req.rank(), read.ToString());
    return false;
  }
  return seen == req.caller_memory_probe();
}

grpc::Status NodeService::Attach(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<kolo::v1::DaemonMessage, kolo::v1::ClientMessage>* stream) {
  auto admitted = Admit(context, stream);
  if (!admitted.ok()) {
    spdlog::warn("attach refused: {}", admitted.status().ToString());
    return ToGrpcStatus(admitted.status());
  }
  const kolo::v1::AttachRequest& req = admitted->request;
  const ProcessCredentials caller = admitted->handoff.caller;
  if (absl::Status s = Reserve(caller.uid); !s.ok()) {
    spdlog::warn("job {} rank {} (uid {}): attach refused: {}", req.job_id(), req.rank(),
                 caller.uid, s.ToString());
    return ToGrpcStatus(s);
  }
  struct Unreserve {
    NodeService* self;
    uid_t uid;
    ~Unreserve() { self->Release(uid); }
  } unreserve{this, caller.uid};
  if (req.shm_bytes() != admitted->handoff.segment_bytes) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("the request says the segment has ", req.shm_bytes(), " bytes, the one ",
                     "handed over has ", admitted->handoff.segment_bytes)));
  }
  const std::string session_id = RandomHex(16);
  const bool elastic = req.has_elastic() && req.elastic().enabled();
  Seat seat{nullptr, req.rank(), req.size(), req.local_rank(), req.local_size(), 0};
  if (elastic) {
    // Ranks are kolod's to number: the attach waits for its epoch to form.
    const kolo::v1::ElasticAttach& e = req.elastic();
    ElasticJoin join{session_id,   caller.pid, req.rank(),        req.size(),        e.min_size(),
                     e.max_size(), e.joiner(), e.previous_rank(), e.previous_epoch()};
    auto elastic_seat = registry_->JoinElastic(
        JoinRequest{caller.uid, req.job_id(), req.job_token(), req.rank(), req.size(), session_id,
                    caller.pid, req.local_size(), req.coordinator(), req.settings()},
        join, [context] { return context->IsCancelled(); });
    if (!elastic_seat.ok()) {
      spdlog::warn("elastic job {} (pid {}): attach refused: {}", req.job_id(), caller.pid,
                   elastic_seat.status().ToString());
      return ToGrpcStatus(elastic_seat.status());
    }
    seat = Seat{elastic_seat->job,        elastic_seat->rank,       elastic_seat->size,
                elastic_seat->local_rank, elastic_seat->local_size, elastic_seat->epoch};
  }
  SessionIdentity identity{session_id, req.job_id(), seat.rank, caller.pid, caller.uid};
  auto session = Session::Open(identity, std::move(admitted->handoff.segment), req.shm_bytes(),
                               options_.limits);
  if (!session.ok()) {
    spdlog::warn("job {} rank {}: attach refused: {}", req.job_id(), seat.rank,
                 session.status().ToString());
    if (seat.job != nullptr) {
      registry_->Leave(seat.job, caller.uid, seat.rank, /*clean=*/false, session.status());
    }
    return ToGrpcStatus(session.status());
  }
  const bool caller_memory = CallerMemoryProven(req, caller.uid, admitted->handoff.memory.get());
  if (caller_memory) (*session)->EnableCallerMemory(admitted->handoff.memory);
  if (!elastic) {
    auto job = registry_->Join(JoinRequest{caller.uid, req.job_id(), req.job_token(), req.rank(),
                                           req.size(), identity.session_id, caller.pid,
                                           req.local_size(), req.coordinator(), req.settings()});
    if (!job.ok()) {
      spdlog::warn("job {} rank {}: attach refused: {}", req.job_id(), req.rank(),
                   job.status().ToString());
      (*session)->Close();
      return ToGrpcStatus(job.status());
    }
    seat.job = *std::move(job);
  }
  std::shared_ptr<Job>* job = &seat.job;
  if (req.job_token().size() < options_.policy.min_job_token_chars) {
    spdlog::warn(
        "job {} rank {} (uid {}): weak job token of {} characters accepted "
        "(--allow_weak_job_tokens)",
        req.job_id(), req.rank(), caller.uid, req.job_token().size());
  }

  auto entry = std::make_shared<Entry>();
  entry->session = *session;
  entry->job = *job;
  entry->rank = seat.rank;
  entry->uid = caller.uid;
  {
    absl::MutexLock l(&mu_);
    sessions_[identity.session_id] = entry;
  }

  absl::Mutex write_mu;
  absl::Mutex failure_mu;
  absl::Status failure;
  absl::Status started = (*session)->Start(*job, [&](const absl::Status& status) {
    {
      absl::MutexLock l(&failure_mu);
      if (!failure.ok()) return;
      failure = status;
    }
    spdlog::warn("job {} rank {}: session failed: {}", identity.job_id, seat.rank,
                 status.ToString());
    kolo::v1::DaemonMessage event;
    event.mutable_event()->set_job_id(identity.job_id);
    event.mutable_event()->set_code(static_cast<int>(status.code()));
    event.mutable_event()->set_message(std::string(status.message()));
    {
      absl::MutexLock l(&write_mu);
      stream->Write(event);
    }
    context->TryCancel();
  });
  if (!started.ok()) {
    spdlog::warn("job {} rank {}: attach refused: {}", req.job_id(), seat.rank, started.ToString());
    (*session)->Close();
    registry_->Leave(*job, caller.uid, seat.rank, /*clean=*/false, started);
    absl::MutexLock l(&mu_);
    sessions_.erase(identity.session_id);
    return ToGrpcStatus(started);
  }

  kolo::v1::DaemonMessage hello;
  auto* attached = hello.mutable_attached();
  attached->set_session_id(identity.session_id);
  attached->set_shm_abi_version(abi::v1::kVersion);
  attached->set_fusion_threshold_bytes((*job)->fusion_threshold_bytes());
  attached->set_max_submit_capacity(options_.limits.max_submit_capacity);
  attached->set_daemon_version(options_.version);
  attached->set_caller_memory(caller_memory);
  attached->set_tensor_parts(true);
  attached->set_rank(seat.rank);
  attached->set_size(seat.size);
  attached->set_local_rank(seat.local_rank);
  attached->set_local_size(seat.local_size);
  attached->set_epoch(seat.epoch);
  {
    absl::MutexLock l(&write_mu);
    stream->Write(hello);
  }
  spdlog::info("job {} rank {}/{}: attached (pid {}, uid {}, session {}{})", req.job_id(),
               seat.rank, seat.size, caller.pid, caller.uid, identity.session_id,
               elastic ? absl::StrCat(", epoch ", seat.epoch) : "");
  // Once every local rank attached, the job starts its negotiator (across
  // nodes: the last local rank connects this node to the job's coordinator).
  (*job)->MaybeStart();

  // The session lives as long as this stream.
  kolo::v1::ClientMessage ignored;
  while (stream->Read(&ignored)) {
  }

  (*session)->Close();
  absl::Status why;
  {
    absl::MutexLock l(&failure_mu);
    why = failure;
  }
  bool clean = entry->clean.load() && why.ok();
  if (why.ok() && !clean) {
    why = absl::UnavailableError(
        absl::StrCat("its session ended without detaching (pid ", caller.pid, ")"));
  }
  registry_->Leave(*job, caller.uid, seat.rank, clean, why, entry->rejoin.load());
  {
    absl::MutexLock l(&mu_);
    sessions_.erase(identity.session_id);
  }
  if (clean) {
    spdlog::info("job {} rank {}: detached{}", req.job_id(), seat.rank,
                 entry->rejoin.load() ? " to rejoin" : "");
  } else {
    spdlog::warn("job {} rank {}: session lost: {}", req.job_id(), seat.rank, why.ToString());
  }
  return grpc::Status::OK;
}

std::shared_ptr<NodeService::Entry> NodeService::FindSession(const std::string& session_id) const {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(session_id);
  return it == sessions_.end() ? nullptr : it->second;
}

grpc::Status NodeService::Detach(grpc::ServerContext*, const kolo::v1::DetachRequest* request,
                                 kolo::v1::DetachResponse*) {
  std::shared_ptr<Entry> entry = FindSession(request->session_id());
  if (entry == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such session " + request->session_id());
  }
  entry->rejoin.store(request->rejoin());
  entry->clean.store(true);
  return grpc::Status::OK;
}

grpc::Status NodeService::ElasticStatus(grpc::ServerContext*,
                                        const kolo::v1::ElasticStatusRequest* request,
                                        kolo::v1::ElasticStatusResponse* response) {
  std::shared_ptr<Entry> entry = FindSession(request->session_id());
  if (entry == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "elastic status: no session with that id is attached to this kolod");
  }
  response->set_epoch(entry->job->elastic_epoch());
  if (entry->job->elastic_epoch() == 0) return grpc::Status::OK;
  ElasticView view = registry_->Elastic(entry->uid, entry->job->id());
  response->set_current_epoch(view.epoch);
  response->set_joiners_waiting(view.joiners_waiting);
  return grpc::Status::OK;
}

grpc::Status NodeService::JobAutotune(grpc::ServerContext*,
                                      const kolo::v1::JobAutotuneRequest* request,
                                      kolo::v1::JobAutotuneResponse* response) {
  std::shared_ptr<Entry> entry = FindSession(request->session_id());
  if (entry == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "job autotune: no session with that id is attached to this kolod");
  }
  absl::StatusOr<plan::TunerReport> report = entry->job->Autotune(request->since());
  if (!report.ok()) return ToGrpcStatus(report.status());
  for (const plan::TunerSample& s : report->samples) {
    kolo::v1::AutotuneSample* out = response->add_samples();
    out->set_index(s.index);
    out->set_fusion_threshold_bytes(s.fusion_threshold_bytes);
    out->set_score(s.score);
    out->set_steps(s.steps);
    out->set_seconds(s.seconds);
    out->set_warmup(s.warmup);
  }
  response->set_fusion_threshold_bytes(report->fusion_threshold_bytes);
  response->set_done(report->done);
  response->set_total(report->total);
  return grpc::Status::OK;
}

grpc::Status NodeService::JobTimeline(grpc::ServerContext*,
                                      const kolo::v1::JobTimelineRequest* request,
                                      kolo::v1::JobTimelineResponse* response) {
  // The id is untrusted: it is looked up, never echoed.
  std::shared_ptr<Entry> entry = FindSession(request->session_id());
  if (entry == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "job timeline: no session with that id is attached to this kolod");
  }
  Job& job = *entry->job;
  switch (request->action()) {
    case kolo::v1::JobTimelineRequest::START: {
      const uint64_t limit = options_.policy.max_job_timeline_events;
      if (request->max_events() > limit) {
        return grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("job ", job.id(), " rank ", entry->rank, ": a job timeline holds at most ",
                         limit, " events; max_events ", request->max_events(), " is over that"));
      }
      const uint64_t max_events = request->max_events() == 0 ? limit : request->max_events();
      const bool restarted = job.timeline().recording();
      job.timeline().Start(max_events);
      spdlog::info("job {}: timeline {} by rank {} (at most {} events)", job.id(),
                   restarted ? "restarted" : "started", entry->rank, max_events);
      return grpc::Status::OK;
    }
    case kolo::v1::JobTimelineRequest::STOP: {
      absl::StatusOr<TimelineTrace> trace = job.timeline().StopRecording();
      if (!trace.ok()) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            absl::StrCat("job ", job.id(), " rank ", entry->rank,
                                         ": no timeline of this job is being recorded on this node "
                                         "(start one first)"));
      }
      response->set_trace_json(std::move(trace->json));
      response->set_events(trace->events);
      response->set_dropped(trace->dropped);
      spdlog::info("job {}: timeline stopped by rank {}: {} events, {} dropped", job.id(),
                   entry->rank, trace->events, trace->dropped);
      return grpc::Status::OK;
    }
    default:
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("job timeline: action ", static_cast<int>(request->action()),
                                       " is neither START (1) nor STOP (2)"));
  }
}

int NodeService::sessions() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(sessions_.size());
}

}  // namespace kolo::daemon
