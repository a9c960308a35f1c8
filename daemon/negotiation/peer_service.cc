#include "daemon/negotiation/peer_service.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

// Writes the coordinator's messages to one member's stream, until the
// handler that owns the stream returns.
class StreamSink : public MemberSink {
 public:
  explicit StreamSink(
      grpc::ServerReaderWriter<kolo::v1::CoordinatorMessage, kolo::v1::MemberMessage>* stream)
      : stream_(stream) {}
  void Send(const kolo::v1::CoordinatorMessage& message) override {
    absl::MutexLock l(&mu_);
    if (stream_ != nullptr) stream_->Write(message);
  }
  void Close() {
    absl::MutexLock l(&mu_);
    stream_ = nullptr;
  }

 private:
  absl::Mutex mu_;
  grpc::ServerReaderWriter<kolo::v1::CoordinatorMessage, kolo::v1::MemberMessage>* stream_
      ABSL_GUARDED_BY(mu_);
};

// How long a node that joins a job waits for the job's rank 0 to attach on
// this daemon.
constexpr absl::Duration kJobStartWait = absl::Minutes(5);

}  // namespace

CoordinatorRegistry::CoordinatorRegistry(CoordinatorOptions options, absl::Duration heartbeat,
                                         absl::Duration peer_timeout)
    : options_(options), heartbeat_(heartbeat), peer_timeout_(peer_timeout) {
  thread_ = std::thread([this] { Loop(); });
}

CoordinatorRegistry::~CoordinatorRegistry() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

std::shared_ptr<Coordinator> CoordinatorRegistry::GetOrCreate(const std::string& job_id,
                                                              const std::string& token, int size) {
  absl::MutexLock l(&mu_);
  auto it = coordinators_.find(job_id);
  if (it != coordinators_.end() && !it->second->aborted()) return it->second;
  auto c = std::make_shared<Coordinator>(job_id, token, size, options_);
  coordinators_[job_id] = c;
  return c;
}

absl::StatusOr<std::shared_ptr<Coordinator>> CoordinatorRegistry::WaitFor(
    const std::string& job_id, absl::Duration timeout, const std::function<bool()>& keepalive) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock l(&mu_);
  auto live = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    auto it = coordinators_.find(job_id);
    return stop_ || (it != coordinators_.end() && !it->second->aborted());
  };
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
  return coordinators_.at(job_id);
}

bool CoordinatorRegistry::AwaitWaiters(int n, absl::Duration timeout) const {
  absl::MutexLock l(&mu_);
  auto enough = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return waiters_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

int CoordinatorRegistry::size() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(coordinators_.size());
}

void CoordinatorRegistry::Loop() {
  absl::MutexLock l(&mu_);
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), heartbeat_);
    if (stop_) return;
    std::vector<std::pair<std::string, std::shared_ptr<Coordinator>>> all(coordinators_.begin(),
                                                                          coordinators_.end());
    mu_.Unlock();
    std::vector<std::string> finished;
    absl::Time now = absl::Now();
    for (auto& [id, c] : all) {
      bool alive = c->Tick(now, peer_timeout_);
      if (!alive && c->members() == 0) finished.push_back(id);
    }
    mu_.Lock();
    for (const auto& id : finished) {
      auto it = coordinators_.find(id);
      if (it != coordinators_.end() && it->second->aborted() && it->second->members() == 0) {
        coordinators_.erase(it);
      }
    }
  }
}

grpc::Status PeerService::Negotiate(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<kolo::v1::CoordinatorMessage, kolo::v1::MemberMessage>* stream) {
  kolo::v1::MemberMessage first;
  if (!stream->Read(&first) || !first.has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Negotiate must start with Hello");
  }
  const kolo::v1::Hello& hello = first.hello();
  if (hello.job_id().empty() || hello.size() < 1) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Hello without job or size");
  }
  // The job's coordinator is made by this daemon's own part of the job (it
  // hosts rank 0), with the token its ranks attached with; a node that comes
  // first waits for it, kept alive by heartbeats.
  absl::StatusOr<std::shared_ptr<Coordinator>> found =
      registry_->WaitFor(hello.job_id(), kJobStartWait, [context, stream] {
        if (context->IsCancelled()) return false;
        kolo::v1::CoordinatorMessage beat;
        beat.mutable_heartbeat();
        return stream->Write(beat);
      });
  if (!found.ok()) {
    spdlog::warn("job {}: node {} was not joined: {}", hello.job_id(), hello.node(),
                 found.status().ToString());
    return ToGrpcStatus(found.status());
  }
  std::shared_ptr<Coordinator> coordinator = *std::move(found);
  auto sink = std::make_shared<StreamSink>(stream);
  auto id = coordinator->AddMember(hello, sink);
  if (!id.ok()) {
    sink->Close();
    spdlog::warn("job {}: node {} refused: {}", hello.job_id(), hello.node(),
                 id.status().ToString());
    return ToGrpcStatus(id.status());
  }
  spdlog::info("job {}: node {} joined with {} ranks", hello.job_id(), hello.node(),
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
        coordinator->OnAbort(*id, msg.abort().reason());
        break;
      default:
        break;
    }
  }
  sink->Close();
  coordinator->MemberLost(*id, context->IsCancelled()
                                   ? "its connection broke (daemon died or cut off)"
                                   : "its daemon closed the link");
  return grpc::Status::OK;
}

}  // namespace kolo::daemon
