#include "daemon/wire/peer_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/secret_compare.h"
#include "common/start_thread.h"
#include "daemon/coordinator/abort_status.h"
#include "daemon/wire/bounded_queue.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

using PeerStream = grpc::ServerReaderWriter<kolo::v1::CoordinatorMessage, kolo::v1::MemberMessage>;

// The coordinator's messages to one member's stream: a queue bounded in
// messages and bytes that the sink's own thread writes out, so a member
// that stops reading stalls only its own writer. When the queue is full the
// member is cut off (its stream cancelled); the handler then reports it
// lost, which aborts its job.
class QueuedStreamSink : public MemberSink {
 public:
  // `context` and `stream` must stay valid until Close. Start the writer
  // before the first Send.
  QueuedStreamSink(grpc::ServerContext* context, PeerStream* stream, size_t max_queued,
                   size_t max_queued_bytes)
      : context_(context), stream_(stream), queue_(max_queued, max_queued_bytes) {}
  absl::Status StartWriter() {
    absl::StatusOr<std::thread> writer =
        StartThread("a member's coordinator stream", "kolo-coord-wr", [this] { WriteLoop(); });
    if (!writer.ok()) return writer.status();
    writer_ = std::move(*writer);
    return absl::OkStatus();
  }
  ~QueuedStreamSink() override { Close(); }

  void Send(std::shared_ptr<const kolo::v1::CoordinatorMessage> message) override {
    // One message goes to every member of a job: the first sink sizes it,
    // the others read the size it cached (it is not changed once sent).
    const int cached = message->GetCachedSize();
    const size_t bytes = cached > 0 ? static_cast<size_t>(cached) : message->ByteSizeLong();
    absl::MutexLock l(&mu_);
    if (closed_ || broken_ || overflowed_ > 0) return;
    if (!queue_.Push(std::move(message), bytes)) {
      overflowed_ = queue_.size();
      overflowed_bytes_ = queue_.bytes();
      context_->TryCancel();  // ends the handler's Read; it reports the member lost
    }
  }
  // Stops the writer (cancelling a write the member does not take) and drops
  // what is queued; the stream is not touched afterwards. Idempotent.
  void Close() {
    {
      absl::MutexLock l(&mu_);
      if (!closed_) {
        closed_ = true;
        if (writing_) context_->TryCancel();
      }
    }
    if (writer_.joinable()) writer_.join();
  }
  // Messages (and their bytes) queued when the member was cut off for not
  // reading; 0 if not.
  size_t overflowed() const {
    absl::MutexLock l(&mu_);
    return overflowed_;
  }
  size_t overflowed_bytes() const {
    absl::MutexLock l(&mu_);
    return overflowed_bytes_;
  }

 private:
  void WriteLoop() {
    for (;;) {
      std::shared_ptr<const kolo::v1::CoordinatorMessage> message;
      {
        absl::MutexLock l(&mu_);
        auto wake = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return closed_ || !queue_.empty(); };
        mu_.Await(absl::Condition(&wake));
        if (closed_) return;
        message = queue_.Pop();
        writing_ = true;
      }
      const bool ok = stream_->Write(*message);
      absl::MutexLock l(&mu_);
      writing_ = false;
      if (!ok) {
        broken_ = true;  // the handler's Read ends too and reports the member lost
        return;
      }
    }
  }

  grpc::ServerContext* const context_;
  PeerStream* const stream_;
  mutable absl::Mutex mu_;
  BoundedQueue<std::shared_ptr<const kolo::v1::CoordinatorMessage>> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  size_t overflowed_ ABSL_GUARDED_BY(mu_) = 0;
  size_t overflowed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread writer_;  // last: started by StartWriter
};

// "ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7": streams are counted per host.
std::string PeerHost(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  const size_t kind = peer.find(':');
  if (colon == std::string::npos || colon == kind) return peer;
  return peer.substr(0, colon);
}

// Who a stream's peer is, for its share of held Hellos and its failure
// budget: its certificate's identity under TLS (cut short: untrusted until
// the token is checked, though the CA signed it), else its host.
std::string PeerIdentity(const grpc::ServerContext& context, const std::string& host) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return host;
  constexpr size_t kMaxShown = 256;
  std::string id = "certificate ";
  for (const grpc::string_ref& name : auth->GetPeerIdentity()) {
    if (id.size() > sizeof("certificate ") - 1) id += ",";
    id.append(name.data(), name.size());
    if (id.size() > kMaxShown) {
      id.resize(kMaxShown);
      break;
    }
  }
  return id;
}

// The job and token of a stream's metadata (kJobIdKey, kJobTokenKey), or
// why it has none.
absl::StatusOr<StreamJob> JobOf(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto id = metadata.find(kJobIdKey);
  auto token = metadata.find(kJobTokenKey);
  if (id == metadata.end() || token == metadata.end() || id->second.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "a Peer call (Negotiate, Rendezvous) names its job and token in its metadata (", kJobIdKey,
        ", ", kJobTokenKey, "); a kolod that sends only Hello is older than this one: upgrade it"));
  }
  if (id->second.size() > kMaxJobIdBytes || token->second.size() > kMaxJobTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a job id of ", id->second.size(), " bytes or a token of ", token->second.size(),
        " bytes in the stream's metadata (at most ", kMaxJobIdBytes, " each)"));
  }
  return StreamJob{std::string(id->second.data(), id->second.size()),
                   std::string(token->second.data(), token->second.size())};
}

// A refusal the member answers by saying Hello again (member_link.h).
grpc::Status RetryHello(grpc::ServerContext* context, grpc::StatusCode code,
                        const std::string& why) {
  context->AddTrailingMetadata(kRetryHelloKey, "1");
  return grpc::Status(code, why);
}

// A peer's Hello in messages: its node name, cut short (it is untrusted).
std::string NodeOf(const kolo::v1::Hello& hello) {
  constexpr size_t kMaxShown = 128;
  return hello.node().size() <= kMaxShown ? hello.node()
                                          : hello.node().substr(0, kMaxShown) + "...";
}

}  // namespace

// One stream's place in the per-peer and total counts, while it is held.
class PeerService::StreamSlot {
 public:
  // `admitted`: the stream named a running job with its token; `peer` then
  // names the peer and the job, so that what others do from that peer
  // (unknown jobs, wrong tokens) never fills its cap, and the total (for
  // streams not yet known) does not apply.
  StreamSlot(PeerService* service, std::string peer, bool admitted)
      : service_(service), peer_(std::move(peer)) {
    absl::MutexLock l(&service_->mu_);
    int& mine = service_->streams_by_peer_[peer_];
    if (mine >= service_->limits_.max_streams_per_peer) {
      refused_ = absl::StrCat("peer ", peer_, " already holds ", mine,
                              " Peer streams (the limit per peer)");
    } else if (!admitted && service_->streams_ >= service_->limits_.max_streams) {
      refused_ = absl::StrCat("this kolod already serves ", service_->streams_,
                              " Peer streams (the limit)");
    }
    if (!refused_.empty()) {
      if (mine == 0) service_->streams_by_peer_.erase(peer_);
      return;
    }
    ++mine;
    ++service_->streams_;
  }
  ~StreamSlot() {
    if (!refused_.empty()) return;
    absl::MutexLock l(&service_->mu_);
    --service_->streams_;
    auto it = service_->streams_by_peer_.find(peer_);
    if (--it->second == 0) service_->streams_by_peer_.erase(it);
  }
  StreamSlot(const StreamSlot&) = delete;
  StreamSlot& operator=(const StreamSlot&) = delete;

  // Empty when the slot was taken, else why not.
  const std::string& refused() const { return refused_; }

 private:
  PeerService* const service_;
  const std::string peer_;
  std::string refused_;
};

// One stream's place among those held for jobs not started yet, per peer
// identity and in total, while it is held.
class PeerService::UnknownJobSlot {
 public:
  UnknownJobSlot(PeerService* service, std::string peer)
      : service_(service), peer_(std::move(peer)) {
    absl::MutexLock l(&service_->mu_);
    int& mine = service_->unknown_by_peer_[peer_];
    if (mine >= service_->limits_.max_unknown_job_streams_per_peer) {
      if (mine == 0) service_->unknown_by_peer_.erase(peer_);
      taken_ = false;
      held_ = mine;
      return;
    }
    ++mine;
    ++service_->unknown_streams_;
  }
  ~UnknownJobSlot() {
    if (!taken_) return;
    absl::MutexLock l(&service_->mu_);
    --service_->unknown_streams_;
    auto it = service_->unknown_by_peer_.find(peer_);
    if (--it->second == 0) service_->unknown_by_peer_.erase(it);
  }
  UnknownJobSlot(const UnknownJobSlot&) = delete;
  UnknownJobSlot& operator=(const UnknownJobSlot&) = delete;

  bool taken() const { return taken_; }
  int held() const { return held_; }  // when not taken: how many the peer holds

 private:
  PeerService* const service_;
  const std::string peer_;
  bool taken_ = true;
  int held_ = 0;
};

CoordinatorRegistry::CoordinatorRegistry(CoordinatorOptions options, absl::Duration heartbeat,
                                         absl::Duration peer_timeout)
    : options_(options), heartbeat_(heartbeat), peer_timeout_(peer_timeout) {}

absl::StatusOr<std::unique_ptr<CoordinatorRegistry>> CoordinatorRegistry::Start(
    CoordinatorOptions options, absl::Duration heartbeat, absl::Duration peer_timeout) {
  std::unique_ptr<CoordinatorRegistry> registry(
      new CoordinatorRegistry(std::move(options), heartbeat, peer_timeout));
  absl::StatusOr<std::thread> thread =
      StartThread("the coordinators' heartbeat", "kolo-coord", [p = registry.get()] { p->Loop(); });
  if (!thread.ok()) return thread.status();
  registry->thread_ = std::move(*thread);
  return registry;
}

CoordinatorRegistry::~CoordinatorRegistry() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Coordinator> CoordinatorRegistry::FindLocked(const std::string& job_id,
                                                             const std::string& token) const {
  auto it = coordinators_.find(job_id);
  if (it == coordinators_.end()) return nullptr;
  for (const std::shared_ptr<Coordinator>& c : it->second) {
    if (!c->aborted() && c->HasToken(token)) return c;
  }
  return nullptr;
}

std::shared_ptr<Coordinator> CoordinatorRegistry::GetOrCreate(
    const std::string& job_id, const std::string& token, int size,
    const kolo::v1::JobSettings& asked, const std::optional<plan::JobSettings>& settings) {
  absl::MutexLock l(&mu_);
  if (std::shared_ptr<Coordinator> c = FindLocked(job_id, token)) return c;
  CoordinatorOptions options = options_;
  options.asked_settings = asked;
  if (settings.has_value()) {
    options.fusion_threshold_bytes = settings->fusion_threshold_bytes;
    options.cache_capacity = settings->cache_capacity;
    options.autotune = settings->autotune;
  }
  auto c = std::make_shared<Coordinator>(job_id, token, size, options);
  coordinators_[job_id].push_back(c);
  return c;
}

absl::StatusOr<std::shared_ptr<Coordinator>> CoordinatorRegistry::WaitFor(
    const std::string& job_id, const std::string& token, absl::Duration timeout,
    const std::function<bool()>& keepalive) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock l(&mu_);
  // Some job of this id runs here: with this token it is joined, with
  // another the stream is refused at once and nothing of that job touched.
  auto live = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_ || StartedLocked(job_id); };
  ++waiters_;
  struct Leave {
    int* waiters;
    ~Leave() { --*waiters; }
  } leave{&waiters_};  // mu_ is held whenever WaitFor returns
  while (!live()) {
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::NotFoundError(absl::StrCat("job ", job_id,
                                              " has not started here (the kolod of its rank 0) "
                                              "yet: not within ",
                                              absl::FormatDuration(timeout), "; say Hello again"));
    }
    mu_.AwaitWithDeadline(absl::Condition(&live), std::min(deadline, now + heartbeat_));
    if (live()) break;
    mu_.Unlock();
    const bool go_on = keepalive();
    mu_.Lock();
    if (!go_on) {
      return absl::CancelledError(
          absl::StrCat("job ", job_id, ": the joining node went away while it waited"));
    }
  }
  if (stop_) return absl::UnavailableError("kolod is shutting down");
  std::shared_ptr<Coordinator> c = FindLocked(job_id, token);
  if (c == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("job ", job_id, ": wrong job token (the job runs here under another)"));
  }
  return c;
}

bool CoordinatorRegistry::StartedLocked(const std::string& job_id) const {
  auto it = coordinators_.find(job_id);
  if (it == coordinators_.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(),
                     [](const std::shared_ptr<Coordinator>& c) { return !c->aborted(); });
}

std::shared_ptr<Coordinator> CoordinatorRegistry::Find(const std::string& job_id,
                                                       const std::string& token) const {
  absl::MutexLock l(&mu_);
  return FindLocked(job_id, token);
}

bool CoordinatorRegistry::Started(const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  return StartedLocked(job_id);
}

bool CoordinatorRegistry::AwaitWaiters(int n, absl::Duration timeout) const {
  absl::MutexLock l(&mu_);
  auto enough = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return waiters_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

int CoordinatorRegistry::size() const {
  absl::MutexLock l(&mu_);
  size_t n = 0;
  for (const auto& [id, all] : coordinators_) n += all.size();
  return static_cast<int>(n);
}

void CoordinatorRegistry::Loop() {
  absl::MutexLock l(&mu_);
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), heartbeat_);
    if (stop_) return;
    std::vector<std::shared_ptr<Coordinator>> all;
    for (const auto& [id, of_id] : coordinators_) all.insert(all.end(), of_id.begin(), of_id.end());
    mu_.Unlock();
    // Sinks never block (a member that stops reading is cut off by its own
    // queue), so one job's slow member delays no other job's heartbeats.
    std::vector<std::shared_ptr<Coordinator>> finished;
    absl::Time now = absl::Now();
    for (auto& c : all) {
      bool alive = c->Tick(now, peer_timeout_);
      if (!alive && c->members() == 0) finished.push_back(c);
    }
    mu_.Lock();
    for (const auto& c : finished) {
      auto it = coordinators_.find(c->job_id());
      if (it == coordinators_.end() || !c->aborted() || c->members() != 0) continue;
      std::vector<std::shared_ptr<Coordinator>>& of_id = it->second;
      of_id.erase(std::remove(of_id.begin(), of_id.end(), c), of_id.end());
      if (of_id.empty()) coordinators_.erase(it);
    }
  }
}

PeerService::PeerService(CoordinatorRegistry* registry, PeerServiceLimits limits,
                         ElasticLeaders* elastic_leaders)
    : registry_(registry),
      elastic_leaders_(elastic_leaders),
      limits_(limits),
      auth_watch_(std::make_unique<CallDeadlines>()),
      failures_(limits.failures) {}

grpc::Status PeerService::StreamedRendezvous(
    grpc::ServerContext* context,
    grpc::ServerUnaryStreamer<kolo::v1::ElasticReport, kolo::v1::ElasticFormed>* stream) {
  if (elastic_leaders_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "rendezvous: this kolod leads no elastic jobs");
  }
  const std::string identity = PeerIdentity(*context, PeerHost(context->peer()));
  if (absl::Status spent = failures_.Check(identity, absl::Now()); !spent.ok()) {
    return ToGrpcStatus(spent);
  }
  absl::StatusOr<StreamJob> job = JobOf(*context);
  if (!job.ok()) {
    CountFailure(identity, absl::StrCat("rendezvous: ", job.status().message()));
    return ToGrpcStatus(job.status());
  }
  if (!elastic_leaders_->Knows(job->id, job->token)) {
    // Not counted against the budget: a node whose report comes before
    // this daemon's own ranks attached asks again every half second.
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("rendezvous: no elastic job ", job->id.substr(0, 128),
                                     " with that token spans nodes from this kolod (yet)"));
  }
  kolo::v1::ElasticReport report;
  if (!stream->Read(&report)) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "rendezvous: the call ended before its report");
  }
  if (report.job_id() != job->id || !SecretsEqual(report.job_token(), job->token)) {
    const std::string why = "rendezvous: the report names another job than its call's metadata";
    CountFailure(identity, why);
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
  }
  absl::StatusOr<kolo::v1::ElasticFormed> out = elastic_leaders_->Report(report);
  if (!out.ok()) {
    const std::string why =
        absl::StrCat("elastic job ", report.job_id(), ": rendezvous from node ",
                     report.node().substr(0, 128), ": ", out.status().ToString());
    if (absl::IsInvalidArgument(out.status()) || absl::IsPermissionDenied(out.status())) {
      CountFailure(identity, why);
    } else {
      spdlog::warn("{} ({})", why, identity);
    }
    return ToGrpcStatus(out.status());
  }
  if (!stream->Write(*out)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "rendezvous: the caller went away");
  }
  return grpc::Status::OK;
}

PeerService::~PeerService() = default;

int PeerService::streams() const {
  absl::MutexLock l(&mu_);
  return streams_;
}

int PeerService::unknown_job_streams() const {
  absl::MutexLock l(&mu_);
  return unknown_streams_;
}

grpc::Status PeerService::ReadHello(grpc::ServerContext* context, PeerStream* stream,
                                    const StreamJob& job, kolo::v1::Hello* hello) {
  const absl::StatusOr<uint64_t> watch =
      auth_watch_->Arm(context, absl::Now() + limits_.auth_deadline);
  if (!watch.ok()) return ToGrpcStatus(watch.status());
  kolo::v1::MemberMessage first;
  const bool read = stream->Read(&first);
  if (auth_watch_->Disarm(*watch)) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat("no Hello within ", absl::FormatDuration(limits_.auth_deadline),
                     " of the stream's job being found"));
  }
  if (!read) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Negotiate must start with Hello");
  }
  if (first.ByteSizeLong() > limits_.max_hello_bytes) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("a first message of ", first.ByteSizeLong(),
                                     " bytes; a Hello takes at most ", limits_.max_hello_bytes));
  }
  if (!first.has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Negotiate must start with Hello");
  }
  *hello = std::move(*first.mutable_hello());
  if (hello->job_id().empty() || hello->size() < 1) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Hello without job or size");
  }
  if (hello->job_id() != job.id || !SecretsEqual(hello->job_token(), job.token)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the Hello names another job or token than the stream's metadata");
  }
  return grpc::Status::OK;
}

void PeerService::CountFailure(const std::string& identity, const std::string& why) {
  spdlog::warn("Peer stream from {} refused: {}", identity, why);
  if (failures_.RecordFailure(identity, absl::Now())) {
    spdlog::warn(
        "peer {} failed authentication more than {} times within {}: its streams are "
        "refused for {}",
        identity, limits_.failures.max_failures, absl::FormatDuration(limits_.failures.window),
        absl::FormatDuration(limits_.failures.backoff));
  }
}

grpc::Status PeerService::FindCoordinator(grpc::ServerContext* context, PeerStream* stream,
                                          const std::string& identity, const StreamJob& job,
                                          std::shared_ptr<Coordinator>* coordinator) {
  std::optional<UnknownJobSlot> held;
  if (!registry_->Started(job.id)) {
    held.emplace(this, identity);
    if (!held->taken()) {
      const std::string why = absl::StrCat("job ", job.id, " has not started here yet, and peer ",
                                           identity, " already has ", held->held(),
                                           " Hellos waiting for jobs that have not (the limit)");
      // Not logged: a peer may ask again and again (the held ones are
      // logged, and counted, when they expire).
      return RetryHello(context, grpc::StatusCode::RESOURCE_EXHAUSTED, why);
    }
  }
  absl::StatusOr<std::shared_ptr<Coordinator>> found =
      registry_->WaitFor(job.id, job.token, limits_.unknown_job_wait, [context, stream] {
        if (context->IsCancelled()) return false;
        kolo::v1::CoordinatorMessage beat;
        beat.mutable_heartbeat();
        return stream->Write(beat);
      });
  if (found.ok()) {
    *coordinator = *std::move(found);
    return grpc::Status::OK;
  }
  const absl::Status& why = found.status();
  const std::string shown =
      absl::StrCat("job ", job.id, ": peer ", identity, " was not joined: ", why.ToString());
  if (absl::IsNotFound(why) || absl::IsPermissionDenied(why)) {
    CountFailure(identity, shown);
  } else {
    spdlog::warn("{}", shown);
  }
  if (absl::IsNotFound(why)) {
    return RetryHello(context, grpc::StatusCode::NOT_FOUND, std::string(why.message()));
  }
  return ToGrpcStatus(why);
}

// One member's stream:
//   1. take the job id and token from the stream's metadata (bounded by the
//      server's metadata limit); nothing is read yet. A stream that names a
//      job running here with its token skips 2 and 3's waiting;
//   2. otherwise refuse a peer identity whose failure budget is spent, and
//      take a slot (per peer address and in total), else
//      RESOURCE_EXHAUSTED; no metadata is UNAUTHENTICATED;
//   3. find the job's coordinator by job id and token, else
//      PERMISSION_DENIED: nothing is held for a wrong token. A job that has
//      not started here yet (its rank 0 has not attached) is waited for,
//      kept alive by heartbeats, within the peer's share and for a few
//      seconds, then answered NOT_FOUND for the member to say Hello again;
//   4. only now read the first message: the Hello, within the auth deadline,
//      bounded in size and naming the same job and token. gRPC 1.51 buffers
//      a message whole before it applies the receive bound, so reading
//      nothing before step 3 is what bounds a peer without the token to
//      the stream's flow-control window. A failure in 2, 3 or 4 counts
//      against the peer's budget;
//   5. join it, with a bounded queue for what the coordinator sends;
//   6. relay the member's messages until its stream ends, then report it
//      lost (naming a member cut off for not reading).
grpc::Status PeerService::Negotiate(grpc::ServerContext* context, PeerStream* stream) {
  const std::string peer = PeerHost(context->peer());
  const std::string identity = PeerIdentity(*context, peer);
  // A stream that names a job running here with its token is admitted
  // whatever else its peer identity did: in plaintext an identity is a
  // host, and any local user there may spend its budget and shares, which
  // must not lock that host's kolod out of its jobs.
  absl::StatusOr<StreamJob> job = JobOf(*context);
  std::shared_ptr<Coordinator> coordinator =
      job.ok() ? registry_->Find(job->id, job->token) : nullptr;
  const bool admitted = coordinator != nullptr;
  if (!admitted) {
    if (absl::Status spent = failures_.Check(identity, absl::Now()); !spent.ok()) {
      // Not logged per stream: the refusal was, when it began.
      return RetryHello(context, grpc::StatusCode::RESOURCE_EXHAUSTED,
                        std::string(spent.message()));
    }
  }
  StreamSlot slot(this, admitted ? absl::StrCat(peer, " for job ", job->id) : peer, admitted);
  if (!slot.refused().empty()) {
    spdlog::warn("Peer stream from {} refused: {}", peer, slot.refused());
    return RetryHello(context, grpc::StatusCode::RESOURCE_EXHAUSTED, slot.refused());
  }
  if (!job.ok()) {
    CountFailure(identity, std::string(job.status().message()));
    return ToGrpcStatus(job.status());
  }
  if (!admitted) {
    if (grpc::Status s = FindCoordinator(context, stream, identity, *job, &coordinator); !s.ok()) {
      return s;
    }
  }
  kolo::v1::Hello hello;
  if (grpc::Status s = ReadHello(context, stream, *job, &hello); !s.ok()) {
    CountFailure(identity, s.error_message());
    return s;
  }
  auto sink = std::make_shared<QueuedStreamSink>(context, stream, limits_.max_queued_messages,
                                                 limits_.max_queued_bytes);
  if (absl::Status s = sink->StartWriter(); !s.ok()) {
    spdlog::warn("job {}: node {} refused: {}", hello.job_id(), NodeOf(hello), s.ToString());
    return ToGrpcStatus(s);
  }
  auto id = coordinator->AddMember(hello, sink);
  if (!id.ok()) {
    sink->Close();
    spdlog::warn("job {}: node {} refused: {}", hello.job_id(), NodeOf(hello),
                 id.status().ToString());
    return ToGrpcStatus(id.status());
  }
  spdlog::info("job {}: node {} joined with {} ranks", hello.job_id(), NodeOf(hello),
               hello.ranks_size());
  kolo::v1::MemberMessage msg;
  while (stream->Read(&msg)) {
    switch (msg.msg_case()) {
      case kolo::v1::MemberMessage::kReady:
        coordinator->OnReady(*id, msg.ready());
        break;
      case kolo::v1::MemberMessage::kHeartbeat:
        coordinator->Heartbeat(*id);
        break;
      case kolo::v1::MemberMessage::kAbort:
        coordinator->OnAbort(*id, FromPeerAbort(msg.abort()));
        break;
      default:
        break;
    }
  }
  sink->Close();
  if (const size_t queued = sink->overflowed(); queued > 0) {
    const absl::Status why = absl::ResourceExhaustedError(
        absl::StrCat("member ", NodeOf(hello), " stopped reading; ", queued, " messages queued (",
                     sink->overflowed_bytes(), " bytes)"));
    spdlog::warn("job {}: {}", hello.job_id(), std::string(why.message()));
    coordinator->MemberLost(*id, why.ToString());
    return ToGrpcStatus(why);
  }
  coordinator->MemberLost(*id, context->IsCancelled()
                                   ? "its connection broke (daemon died or cut off)"
                                   : "its daemon closed the link");
  return grpc::Status::OK;
}

}  // namespace kolo::daemon
