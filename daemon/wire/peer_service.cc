#include "daemon/wire/peer_service.h"

#include <algorithm>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/start_thread.h"
#include "daemon/coordinator/abort_status.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

using PeerStream = grpc::ServerReaderWriter<kolo::v1::CoordinatorMessage, kolo::v1::MemberMessage>;

// The coordinator's messages to one member's stream: a bounded queue that
// the sink's own thread writes out, so a member that stops reading stalls
// only its own writer. When the queue is full the member is cut off (its
// stream cancelled); the handler then reports it lost, which aborts its job.
class QueuedStreamSink : public MemberSink {
 public:
  // `context` and `stream` must stay valid until Close. Start the writer
  // before the first Send.
  QueuedStreamSink(grpc::ServerContext* context, PeerStream* stream, size_t max_queued)
      : context_(context), stream_(stream), max_queued_(max_queued) {}
  absl::Status StartWriter() {
    absl::StatusOr<std::thread> writer =
        StartThread("a member's coordinator stream", "kolo-coord-wr", [this] { WriteLoop(); });
    if (!writer.ok()) return writer.status();
    writer_ = std::move(*writer);
    return absl::OkStatus();
  }
  ~QueuedStreamSink() override { Close(); }

  void Send(std::shared_ptr<const kolo::v1::CoordinatorMessage> message) override {
    absl::MutexLock l(&mu_);
    if (closed_ || broken_ || overflowed_ > 0) return;
    if (queue_.size() >= max_queued_) {
      overflowed_ = queue_.size();
      context_->TryCancel();  // ends the handler's Read; it reports the member lost
      return;
    }
    queue_.push_back(std::move(message));
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
  // Messages queued when the member was cut off for not reading; 0 if not.
  size_t overflowed() const {
    absl::MutexLock l(&mu_);
    return overflowed_;
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
        message = std::move(queue_.front());
        queue_.pop_front();
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
  const size_t max_queued_;
  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<const kolo::v1::CoordinatorMessage>> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  size_t overflowed_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread writer_;  // last: started by StartWriter
};

// "ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7": streams are counted per host.
std::string PeerHost(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  const size_t kind = peer.find(':');
  if (colon == std::string::npos || colon == kind) return peer;
  return peer.substr(0, colon);
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
  StreamSlot(PeerService* service, std::string peer) : service_(service), peer_(std::move(peer)) {
    absl::MutexLock l(&service_->mu_);
    int& mine = service_->streams_by_peer_[peer_];
    if (mine >= service_->limits_.max_streams_per_peer) {
      refused_ = absl::StrCat("peer ", peer_, " already holds ", mine,
                              " Peer streams (the limit per peer)");
    } else if (service_->streams_ >= service_->limits_.max_streams) {
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
  auto started = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    auto it = coordinators_.find(job_id);
    if (it == coordinators_.end()) return false;
    return std::any_of(it->second.begin(), it->second.end(),
                       [](const std::shared_ptr<Coordinator>& c) { return !c->aborted(); });
  };
  auto live = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_ || started(); };
  ++waiters_;
  struct Leave {
    int* waiters;
    ~Leave() { --*waiters; }
  } leave{&waiters_};  // mu_ is held whenever WaitFor returns
  while (!live()) {
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::UnavailableError(absl::StrCat("job ", job_id,
                                                 " did not start on the daemon "
                                                 "of its rank 0 within ",
                                                 absl::ToInt64Seconds(timeout), " s"));
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
      auth_watch_(std::make_unique<CallDeadlines>()) {}

grpc::Status PeerService::Rendezvous(grpc::ServerContext* context,
                                     const kolo::v1::ElasticReport* report,
                                     kolo::v1::ElasticFormed* formed) {
  if (elastic_leaders_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "rendezvous: this kolod leads no elastic jobs");
  }
  absl::StatusOr<kolo::v1::ElasticFormed> out = elastic_leaders_->Report(*report);
  if (!out.ok()) {
    spdlog::warn("elastic job {}: rendezvous from node {} ({}): {}", report->job_id(),
                 report->node(), PeerHost(context->peer()), out.status().ToString());
    return ToGrpcStatus(out.status());
  }
  *formed = *std::move(out);
  return grpc::Status::OK;
}

PeerService::~PeerService() = default;

int PeerService::streams() const {
  absl::MutexLock l(&mu_);
  return streams_;
}

grpc::Status PeerService::ReadHello(grpc::ServerContext* context, PeerStream* stream,
                                    kolo::v1::Hello* hello) {
  const absl::StatusOr<uint64_t> watch =
      auth_watch_->Arm(context, absl::Now() + limits_.auth_deadline);
  if (!watch.ok()) return ToGrpcStatus(watch.status());
  kolo::v1::MemberMessage first;
  const bool read = stream->Read(&first);
  if (auth_watch_->Disarm(*watch)) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat("no Hello within ", absl::FormatDuration(limits_.auth_deadline),
                     " of opening the stream"));
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
  return grpc::Status::OK;
}

// One member's stream:
//   1. take a slot (per peer and in total), else RESOURCE_EXHAUSTED;
//   2. read the Hello within the auth deadline, bounded in size;
//   3. find the job's coordinator by job id and token (waiting, kept alive
//      by heartbeats, for a job whose rank 0 has not attached yet), else
//      PERMISSION_DENIED or UNAVAILABLE: nothing is held for a wrong token;
//   4. join it, with a bounded queue for what the coordinator sends;
//   5. relay the member's messages until its stream ends, then report it
//      lost (naming a member cut off for not reading).
grpc::Status PeerService::Negotiate(grpc::ServerContext* context, PeerStream* stream) {
  const std::string peer = PeerHost(context->peer());
  StreamSlot slot(this, peer);
  if (!slot.refused().empty()) {
    spdlog::warn("Peer stream from {} refused: {}", peer, slot.refused());
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, slot.refused());
  }
  kolo::v1::Hello hello;
  if (grpc::Status s = ReadHello(context, stream, &hello); !s.ok()) {
    spdlog::warn("Peer stream from {} refused: {}", peer, s.error_message());
    return s;
  }
  absl::StatusOr<std::shared_ptr<Coordinator>> found = registry_->WaitFor(
      hello.job_id(), hello.job_token(), limits_.job_start_wait, [context, stream] {
        if (context->IsCancelled()) return false;
        kolo::v1::CoordinatorMessage beat;
        beat.mutable_heartbeat();
        return stream->Write(beat);
      });
  if (!found.ok()) {
    spdlog::warn("job {}: node {} ({}) was not joined: {}", hello.job_id(), NodeOf(hello), peer,
                 found.status().ToString());
    return ToGrpcStatus(found.status());
  }
  std::shared_ptr<Coordinator> coordinator = *std::move(found);
  auto sink = std::make_shared<QueuedStreamSink>(context, stream, limits_.max_queued_messages);
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
        absl::StrCat("member ", NodeOf(hello), " stopped reading; ", queued, " messages queued"));
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
