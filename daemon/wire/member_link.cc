#include "daemon/wire/member_link.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <deque>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/start_thread.h"
#include "daemon/coordinator/abort_status.h"
#include "proto/kolo/abi/types.h"
#include "proto/kolo/v1/peer.grpc.pb.h"

namespace kolo::daemon {

namespace {

// A cache entry the coordinator has not (or will never) put an id on.
constexpr uint32_t kNoCacheId = UINT32_MAX;
// Plans held for an earlier one still on its way (see HandlePlan).
constexpr size_t kMaxEarlyPlans = 1024;
// How long an abort from the coordinator waits for plans it sent before it
// over the lane (normally there within a millisecond).
constexpr absl::Duration kHeldAbortWait = absl::Seconds(2);
// How long closing the link waits for queued messages to go out.
constexpr absl::Duration kFlushOnClose = absl::Seconds(1);

// How long a refused Hello waits before it is said again: doubling from
// the first to the last.
constexpr absl::Duration kFirstRetry = absl::Milliseconds(100);
constexpr absl::Duration kLastRetry = absl::Seconds(2);

// Whether `status`, with `context`'s trailing metadata, asks for the Hello
// again (PeerService marks such refusals).
bool RetryAsked(const grpc::Status& status, const grpc::ClientContext& context) {
  if (status.ok()) return false;
  const auto& trailers = context.GetServerTrailingMetadata();
  return trailers.find(kRetryHelloKey) != trailers.end();
}

// The coordinator is on another daemon: a gRPC stream, reopened with the
// same Hello while the coordinator's daemon asks for it (see ConnectPeer).
// The messages sent since the Hello are said again on the new stream by the
// next Send (the writer's, a heartbeat at the latest), so the reader never
// blocks on a stream the coordinator does not read yet.
class GrpcPeerChannel : public PeerChannel {
 public:
  GrpcPeerChannel(std::shared_ptr<grpc::Channel> channel, absl::Duration join_wait)
      : stub_(kolo::v1::Peer::NewStub(channel)), join_wait_(join_wait) {}
  ~GrpcPeerChannel() override { Close(); }

  absl::Status Send(const kolo::v1::MemberMessage& message) override {
    absl::MutexLock w(&write_mu_);
    Attempt* attempt;
    bool welcomed;
    {
      absl::MutexLock l(&mu_);
      if (message.has_hello() && current_ == nullptr) {
        // The stream opens with the Hello: its metadata names the job.
        current_ = std::make_unique<Attempt>(stub_.get(), message.hello());
        first_hello_ = absl::Now();
        if (closed_) current_->context.TryCancel();
      }
      attempt = current_.get();
      welcomed = welcomed_;
    }
    if (attempt == nullptr) return absl::FailedPreconditionError("no Hello said yet");
    if (message.has_hello()) {
      hello_ = message;
      replay_.clear();
      replay_sent_ = 0;
      // The coordinator's daemon may refuse the stream from its metadata
      // before the Hello is written: the reader then gets the refusal and
      // its reason, which a failed write here would hide.
      (void)Write(attempt, message);
      return absl::OkStatus();
    }
    const bool kept =
        !welcomed && !message.has_heartbeat() && replay_.size() < kMaxReplayedMessages;
    if (kept) replay_.push_back(message);
    // A reopened stream first gets what the refused one had.
    for (; replay_sent_ < replay_.size(); ++replay_sent_) {
      if (absl::Status s = Write(attempt, replay_[replay_sent_]); !s.ok()) return s;
    }
    if (welcomed) {
      replay_.clear();  // no stream is reopened after the Welcome
      replay_sent_ = 0;
    }
    return kept ? absl::OkStatus() : Write(attempt, message);
  }
  bool Receive(kolo::v1::CoordinatorMessage* message, std::string* why) override {
    Attempt* attempt;  // only this (the reader's) thread replaces it
    {
      absl::MutexLock l(&mu_);
      attempt = current_.get();
    }
    if (attempt == nullptr) {
      *why = "no Hello was said";
      return false;
    }
    if (attempt->stream->Read(message)) {
      if (message->has_welcome()) {
        absl::MutexLock l(&mu_);
        welcomed_ = true;
      }
      return true;
    }
    grpc::Status s = attempt->stream->Finish();
    const bool retry = RetryAsked(s, attempt->context);
    if (retry && Reopen()) {
      message->Clear();
      message->mutable_heartbeat();
      return true;
    }
    if (retry) {
      absl::MutexLock l(&mu_);
      *why = absl::StrCat(
          "said Hello for ",
          absl::FormatDuration(absl::Trunc(absl::Now() - first_hello_, absl::Seconds(1))),
          " without being joined: ", s.error_message());
      return false;
    }
    *why = s.ok() ? std::string("the coordinator ended the stream")
                  : absl::StrCat(s.error_code() == grpc::StatusCode::PERMISSION_DENIED
                                     ? "PERMISSION_DENIED: "
                                     : "",
                                 s.error_message());
    return false;
  }
  void Close() override {
    absl::MutexLock l(&mu_);
    closed_ = true;
    if (current_ != nullptr) current_->context.TryCancel();
  }

 private:
  // Messages other than heartbeats kept to say again (before the Welcome:
  // a few reports at most).
  static constexpr size_t kMaxReplayedMessages = 4096;

  // One stream, for the job of `hello`.
  struct Attempt {
    Attempt(kolo::v1::Peer::Stub* stub, const kolo::v1::Hello& hello) {
      context.AddMetadata(kJobIdKey, hello.job_id());
      context.AddMetadata(kJobTokenKey, hello.job_token());
      stream = stub->Negotiate(&context);
    }
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<kolo::v1::MemberMessage, kolo::v1::CoordinatorMessage>>
        stream;
  };

  static absl::Status Write(Attempt* attempt, const kolo::v1::MemberMessage& message) {
    if (!attempt->stream->Write(message)) return absl::UnavailableError("peer stream closed");
    return absl::OkStatus();
  }

  // After the backoff, a new stream that says the Hello again; false when
  // the link closed, was welcomed or has waited long enough.
  bool Reopen() {
    {
      absl::MutexLock l(&mu_);
      if (closed_ || welcomed_ || absl::Now() + backoff_ - first_hello_ > join_wait_) {
        return false;
      }
      mu_.AwaitWithTimeout(absl::Condition(&closed_), backoff_);
      if (closed_) return false;
      backoff_ = std::min(backoff_ * 2, kLastRetry);
    }
    // The writers are done with the old stream: it has finished.
    absl::MutexLock w(&write_mu_);
    if (!hello_.has_hello()) return false;
    auto next = std::make_unique<Attempt>(stub_.get(), hello_.hello());
    Attempt* attempt = next.get();
    std::unique_ptr<Attempt> old;
    {
      absl::MutexLock l(&mu_);
      if (closed_) next->context.TryCancel();
      old = std::move(current_);
      current_ = std::move(next);
    }
    replay_sent_ = 0;
    (void)Write(attempt, hello_);  // on failure its Read ends too, saying why
    return true;
  }

  std::unique_ptr<kolo::v1::Peer::Stub> stub_;
  const absl::Duration join_wait_;
  // One writer at a time, and the stream is replaced only under it.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  kolo::v1::MemberMessage hello_ ABSL_GUARDED_BY(write_mu_);
  // Sent since the Hello, until the Welcome; how many went on this stream.
  std::vector<kolo::v1::MemberMessage> replay_ ABSL_GUARDED_BY(write_mu_);
  size_t replay_sent_ ABSL_GUARDED_BY(write_mu_) = 0;
  absl::Mutex mu_;
  std::unique_ptr<Attempt> current_ ABSL_GUARDED_BY(mu_);
  absl::Time first_hello_ ABSL_GUARDED_BY(mu_);
  bool welcomed_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_) = kFirstRetry;
};

// The coordinator is in this daemon: direct calls, and a queue for its
// messages to us.
class LocalPeerChannel : public PeerChannel {
 public:
  explicit LocalPeerChannel(std::shared_ptr<Coordinator> coordinator)
      : coordinator_(std::move(coordinator)), inbox_(std::make_shared<Inbox>()) {}
  ~LocalPeerChannel() override { Close(); }

  absl::Status Send(const kolo::v1::MemberMessage& message) override {
    switch (message.msg_case()) {
      case kolo::v1::MemberMessage::kHello: {
        auto id = coordinator_->AddMember(message.hello(), inbox_);
        if (!id.ok()) {
          inbox_->End(std::string(id.status().ToString()));
          return id.status();
        }
        member_ = *id;
        return absl::OkStatus();
      }
      case kolo::v1::MemberMessage::kReady:
        coordinator_->OnReady(member_, message.ready());
        return absl::OkStatus();
      case kolo::v1::MemberMessage::kHeartbeat:
        coordinator_->Heartbeat(member_);
        return absl::OkStatus();
      case kolo::v1::MemberMessage::kAbort:
        coordinator_->OnAbort(member_, FromPeerAbort(message.abort()));
        return absl::OkStatus();
      default:
        return absl::InvalidArgumentError("empty peer message");
    }
  }
  bool Receive(kolo::v1::CoordinatorMessage* message, std::string* why) override {
    return inbox_->Pop(message, why);
  }
  bool immediate() const override { return true; }
  void Close() override {
    if (member_ >= 0 && !closed_) {
      closed_ = true;
      coordinator_->MemberLost(member_, "its daemon ended the job's link");
    }
    inbox_->End("the link was closed");
  }

 private:
  struct Inbox : MemberSink {
    void Send(std::shared_ptr<const kolo::v1::CoordinatorMessage> m) override {
      absl::MutexLock l(&mu);
      if (!ended) q.push_back(std::move(m));
    }
    bool Pop(kolo::v1::CoordinatorMessage* m, std::string* why) {
      absl::MutexLock l(&mu);
      mu.Await(absl::Condition(
          +[](Inbox* in) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !in->q.empty() || in->ended; },
          this));
      if (!q.empty()) {
        *m = *q.front();
        q.pop_front();
        return true;
      }
      *why = end_reason;
      return false;
    }
    void End(std::string why) {
      absl::MutexLock l(&mu);
      if (!ended) end_reason = std::move(why);
      ended = true;
    }
    absl::Mutex mu;
    std::deque<std::shared_ptr<const kolo::v1::CoordinatorMessage>> q;
    bool ended = false;
    std::string end_reason;
  };
  std::shared_ptr<Coordinator> coordinator_;
  std::shared_ptr<Inbox> inbox_;
  int member_ = -1;
  bool closed_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PeerChannel>> ConnectPeer(
    const std::string& address, absl::Duration timeout,
    std::shared_ptr<grpc::ChannelCredentials> credentials, absl::Duration join_wait) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Plans of large jobs outgrow gRPC's 4 MiB default (an alltoall's split
  // matrix has size^2 entries).
  args.SetMaxReceiveMessageSize(kMaxPeerMessageBytes);
  auto channel = grpc::CreateCustomChannel(address, std::move(credentials), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 absl::ToChronoNanoseconds(timeout))) {
    return absl::UnavailableError(absl::StrCat(
        "no kolod answering on the coordinator's peer address ", address,
        " (or the TLS handshake failed: both daemons need certificates from the same "
        "--peer_tls_ca, the coordinator's naming that address; or one runs --peer_plaintext "
        "and the other TLS)"));
  }
  return std::unique_ptr<PeerChannel>(new GrpcPeerChannel(std::move(channel), join_wait));
}

std::unique_ptr<PeerChannel> LocalPeer(std::shared_ptr<Coordinator> coordinator) {
  return std::make_unique<LocalPeerChannel>(std::move(coordinator));
}

MemberLink::MemberLink(std::unique_ptr<PeerChannel> channel, MemberLinkOptions options,
                       LinkListener* listener)
    : channel_(std::move(channel)), options_(std::move(options)), listener_(listener) {}

absl::StatusOr<std::unique_ptr<MemberLink>> MemberLink::Start(std::unique_ptr<PeerChannel> channel,
                                                              MemberLinkOptions options,
                                                              LinkListener* listener) {
  kolo::v1::MemberMessage hello;
  *hello.mutable_hello() = options.hello;
  if (absl::Status s = channel->Send(hello); !s.ok()) return s;
  std::unique_ptr<MemberLink> link(
      new MemberLink(std::move(channel), std::move(options), listener));
  {
    absl::MutexLock l(&link->mu_);
    link->last_heard_ = absl::Now();
  }
  // A link without both threads is closed again by its destructor.
  absl::StatusOr<std::thread> reader = StartThread("the coordinator link's reader", "kolo-link-rd",
                                                   [p = link.get()] { p->ReadLoop(); });
  if (!reader.ok()) return reader.status();
  link->reader_ = std::move(*reader);
  absl::StatusOr<std::thread> writer = StartThread("the coordinator link's writer", "kolo-link-wr",
                                                   [p = link.get()] { p->WriteLoop(); });
  if (!writer.ok()) return writer.status();
  link->writer_ = std::move(*writer);
  return link;
}

MemberLink::~MemberLink() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    // The last words (an Abort saying this node's ranks finished) go out
    // before the stream is cancelled, unless the link cannot take them.
    auto flushed = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return outbox_.empty() && !writing_; };
    mu_.AwaitWithTimeout(absl::Condition(&flushed), kFlushOnClose);
  }
  channel_->Close();
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
}

void MemberLink::Enqueue(kolo::v1::MemberMessage message) {
  absl::MutexLock l(&mu_);
  outbox_.push_back(std::move(message));
}

void MemberLink::ReportReady(const kolo::v1::TensorMeta& meta,
                             const kolo::v1::DeviceLayout* devices) {
  absl::MutexLock l(&mu_);
  if (devices != nullptr) {
    // With every report that holds a device tensor: reports may overtake one
    // another (the stream's before the lane was up, the lane's after), and
    // the coordinator needs the layout when it plans the first device
    // response, whichever report completes it.
    *ready_.mutable_devices() = *devices;
  }
  const std::string key = PeerKey(meta.process_set(), meta.name());
  auto it = cache_.find(key);
  // Only an id the coordinator assigned may stand for the metadata: a name it
  // never caches (an allgather, an alltoall, a full cache) keeps kNoCacheId
  // and goes in full every time.
  if (it != cache_.end() && it->second.first != kNoCacheId &&
      it->second.second.SerializeAsString() == meta.SerializeAsString()) {
    uint32_t id = it->second.first;
    std::string* bits = ready_.mutable_cached_bits();
    if (bits->size() <= id / 8) bits->resize(id / 8 + 1, '\0');
    (*bits)[id / 8] = static_cast<char>((*bits)[id / 8] | (1 << (id % 8)));
  } else {
    *ready_.add_tensors() = meta;
    // Remember what we said, for when the coordinator assigns it an id.
    cache_.try_emplace(key, kNoCacheId, meta);
    if (it != cache_.end() && it->second.first == kNoCacheId) it->second.second = meta;
  }
  ready_dirty_ = true;
}

std::optional<uint32_t> MemberLink::CacheIdOf(const kolo::v1::TensorMeta& meta, bool* same) {
  absl::MutexLock l(&mu_);
  auto it = cache_.find(PeerKey(meta.process_set(), meta.name()));
  if (it == cache_.end() || it->second.first == kNoCacheId) return std::nullopt;
  *same = it->second.second.SerializeAsString() == meta.SerializeAsString();
  return it->second.first;
}

size_t MemberLink::remembered_names() {
  absl::MutexLock l(&mu_);
  return cache_.size();
}

void MemberLink::Abort(const absl::Status& why) {
  kolo::v1::MemberMessage m;
  ToPeerAbort(why, m.mutable_abort());
  Enqueue(std::move(m));
}

std::vector<kolo::v1::MemberMessage> MemberLink::TakeReadyLocked() {
  if (!ready_dirty_) return {};
  kolo::v1::Ready ready = std::move(ready_);
  ready_.Clear();
  ready_dirty_ = false;
  return SplitReady(std::move(ready));
}

std::vector<kolo::v1::MemberMessage> SplitReady(kolo::v1::Ready ready, size_t max_bytes) {
  // What a field of a message adds around its body: a tag and a length.
  constexpr size_t kFieldOverhead = 1 + 5;
  std::vector<kolo::v1::MemberMessage> out;
  if (ready.ByteSizeLong() + kFieldOverhead <= max_bytes) {
    *out.emplace_back().mutable_ready() = std::move(ready);
    return out;
  }
  std::vector<kolo::v1::TensorMeta> tensors(
      std::make_move_iterator(ready.mutable_tensors()->begin()),
      std::make_move_iterator(ready.mutable_tensors()->end()));
  ready.clear_tensors();
  std::stable_partition(tensors.begin(), tensors.end(), [](const kolo::v1::TensorMeta& m) {
    return static_cast<CollectiveKind>(m.kind()) != CollectiveKind::kJoin;
  });
  // Every part with a device tensor carries the layout (parts may travel
  // apart: see ReportReady), so each later part keeps room for it.
  const size_t layout_bytes =
      ready.has_devices() ? ready.devices().ByteSizeLong() + kFieldOverhead : 0;
  // The first message: the bits and the layout, then tensors while they fit.
  kolo::v1::Ready* current = out.emplace_back().mutable_ready();
  *current = std::move(ready);
  size_t bytes = current->ByteSizeLong() + kFieldOverhead;
  for (kolo::v1::TensorMeta& t : tensors) {
    const size_t adds = t.ByteSizeLong() + kFieldOverhead;
    if (bytes + adds > max_bytes &&
        (current->tensors_size() > 0 || bytes > kFieldOverhead + layout_bytes)) {
      current = out.emplace_back().mutable_ready();
      bytes = kFieldOverhead + layout_bytes;
    }
    *current->add_tensors() = std::move(t);
    bytes += adds;
  }
  if (layout_bytes > 0) {
    const kolo::v1::DeviceLayout layout = out.front().ready().devices();
    for (kolo::v1::MemberMessage& m : out) {
      kolo::v1::Ready* r = m.mutable_ready();
      const bool device = std::any_of(r->tensors().begin(), r->tensors().end(),
                                      [](const kolo::v1::TensorMeta& t) { return t.device(); });
      if (device && !r->has_devices()) *r->mutable_devices() = layout;
    }
  }
  return out;
}

void MemberLink::UseLane(MessageLane* lane, int coordinator_node) {
  {
    absl::MutexLock l(&mu_);
    lane_ = lane;
    lane_node_ = coordinator_node;
  }
  // Reports gathered before (the writer no longer wakes for them).
  Flush();
}

bool MemberLink::SendOnLane(const kolo::v1::MemberMessage& message) {
  MessageLane* lane;
  int node;
  {
    absl::MutexLock l(&mu_);
    lane = lane_;
    node = lane_node_;
  }
  if (lane == nullptr) return false;
  auto bytes = std::make_shared<std::string>();
  if (!message.SerializeToString(bytes.get()) || bytes->size() > lane->max_message_bytes()) {
    return false;
  }
  return lane->SendMessage(node, std::move(bytes)).ok();
}

void MemberLink::Flush() {
  std::vector<kolo::v1::MemberMessage> reports;
  {
    absl::MutexLock l(&mu_);
    if (!FlushSendsLocked()) return;
    reports = TakeReadyLocked();
  }
  for (kolo::v1::MemberMessage& m : reports) {
    if (channel_->immediate()) {
      (void)channel_->Send(m);
      continue;
    }
    // Too large for the lane, or the lane is gone: the writer sends it.
    if (!SendOnLane(m)) Enqueue(std::move(m));
  }
}

void MemberLink::OnLaneMessage(absl::string_view message) {
  kolo::v1::CoordinatorMessage msg;
  if (!msg.ParseFromArray(message.data(), static_cast<int>(message.size())) || !msg.has_plan()) {
    bool notify;
    {
      absl::MutexLock l(&mu_);
      notify = !ended_;
      ended_ = true;
    }
    if (notify) {
      listener_->OnLinkAbort(absl::AbortedError(absl::StrCat(
          "the coordinator ", options_.coordinator_name, "'s node sent an unreadable message (",
          message.size(), " bytes) over the data plane")));
    }
    return;
  }
  {
    absl::MutexLock l(&mu_);
    last_heard_ = absl::Now();
  }
  HandlePlan(msg.plan());
}

void MemberLink::HandlePlan(const kolo::v1::Plan& plan) {
  absl::MutexLock order(&plan_mu_);
  uint64_t due;
  {
    absl::MutexLock l(&mu_);
    if (ended_) return;
    due = plans_;
  }
  if (plan.sequence() > due) {
    // The other way may still carry the ones before it; a coordinator that
    // skipped a number would leave this node waiting, so the wait is bounded.
    if (early_plans_.size() >= kMaxEarlyPlans || early_plans_.contains(plan.sequence())) {
      {
        absl::MutexLock l(&mu_);
        ended_ = true;
      }
      listener_->OnLinkAbort(absl::AbortedError(
          absl::StrCat("the coordinator ", options_.coordinator_name, " sent plan ",
                       plan.sequence(), " while plan ", due, " was due, with ", early_plans_.size(),
                       " later plans waiting; the nodes' orders would diverge")));
      return;
    }
    early_plans_.emplace(plan.sequence(), plan);
    return;
  }
  DeliverPlan(plan);  // a number already used ends the link there
  for (;;) {
    std::optional<absl::Status> abort;
    {
      absl::MutexLock l(&mu_);
      abort = TakeDueAbortLocked(absl::Now());
      if (ended_ && !abort.has_value()) return;
      due = plans_;
    }
    if (abort.has_value()) {
      listener_->OnLinkAbort(*abort);
      return;
    }
    auto next = early_plans_.find(due);
    if (next == early_plans_.end()) return;
    kolo::v1::Plan p = std::move(next->second);
    early_plans_.erase(next);
    DeliverPlan(p);
  }
}

void MemberLink::WriteLoop() {
  absl::Time next_beat = absl::Now() + options_.heartbeat;
  for (;;) {
    std::vector<kolo::v1::MemberMessage> batch;
    bool beat = false;
    bool silent = false;
    std::optional<absl::Status> held_abort;
    {
      absl::MutexLock l(&mu_);
      // With a lane (or a coordinator here), Flush sends the reports; the
      // writer sends those left over at its next wake (a heartbeat at the
      // latest).
      auto wake = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stop_ || (ready_dirty_ && !FlushSendsLocked()) || !outbox_.empty();
      };
      mu_.AwaitWithDeadline(absl::Condition(&wake), next_beat);
      if (stop_ && outbox_.empty()) return;
      for (kolo::v1::MemberMessage& m : TakeReadyLocked()) batch.push_back(std::move(m));
      for (auto& m : outbox_) batch.push_back(std::move(m));
      outbox_.clear();
      writing_ = !batch.empty();
      absl::Time now = absl::Now();
      if (now >= next_beat) {
        beat = true;
        next_beat = now + options_.heartbeat;
        if (!ended_ && now - last_heard_ > options_.peer_timeout) {
          silent = true;
          ended_ = true;
        }
      }
      held_abort = TakeDueAbortLocked(now);
    }
    for (const auto& m : batch) {
      if (m.has_ready() && SendOnLane(m)) continue;
      (void)channel_->Send(m);
    }
    if (!batch.empty()) {
      absl::MutexLock l(&mu_);
      writing_ = false;
    }
    if (beat) {
      kolo::v1::MemberMessage m;
      m.mutable_heartbeat();
      (void)channel_->Send(m);
    }
    if (held_abort.has_value()) listener_->OnLinkAbort(*held_abort);
    if (silent) {
      listener_->OnLinkAbort(absl::AbortedError(
          absl::StrCat("lost the coordinator ", options_.coordinator_name, ": it sent nothing for ",
                       absl::ToInt64Seconds(options_.peer_timeout),
                       " s (its daemon is stopped, hung or cut off)")));
    }
  }
}

void MemberLink::DeliverPlan(const kolo::v1::Plan& plan) {
  std::vector<PlannedEntry> entries;
  std::string link_error;
  {
    absl::MutexLock l(&mu_);
    if (ended_) return;
    if (plan.sequence() != plans_) {
      link_error = absl::StrCat("plan ", plan.sequence(), " from the coordinator ",
                                options_.coordinator_name, " arrived where plan ", plans_,
                                " was due; the nodes' orders would diverge");
      ended_ = true;
    }
    ++plans_;
    for (const auto& a : plan.new_cache_ids()) {
      // Recorded even for a name this node never reported (its ranks
      // had all joined): later plans may name it by its id.
      const std::string key = PeerKey(a.process_set(), a.name());
      if (a.cache_id() >= (1u << 24)) continue;  // far beyond any capacity
      if (cache_names_.size() <= a.cache_id()) cache_names_.resize(a.cache_id() + 1);
      cache_names_[a.cache_id()] = key;
      auto it = cache_.find(key);
      if (it == cache_.end()) continue;
      it->second.first = a.cache_id();
    }
    for (const auto& r : plan.responses()) {
      PlannedEntry e;
      for (const auto& m : r.members()) {
        if (m.has_cache_id()) {
          e.names.push_back(m.cache_id() < cache_names_.size() ? cache_names_[m.cache_id()]
                                                               : std::string());
        } else {
          e.names.push_back(PeerKey(r.process_set(), m.name()));
          // Planned without an id: the coordinator does not cache it
          // (its kind, a full cache, a failure). Forget its metadata,
          // or names used once would pile up here for the job's life.
          auto it = cache_.find(e.names.back());
          if (it != cache_.end() && it->second.first == kNoCacheId) cache_.erase(it);
        }
      }
      e.rows.assign(r.rows().begin(), r.rows().end());
      e.process_set = r.process_set();
      e.new_process_set = r.new_process_set();
      e.last_joined = r.last_joined();
      e.joined_nodes.assign(r.joined_nodes().begin(), r.joined_nodes().end());
      e.metas.assign(r.metas().begin(), r.metas().end());
      e.splits.assign(r.splits().begin(), r.splits().end());
      if (r.error_code() != 0) {
        e.error = absl::Status(static_cast<absl::StatusCode>(r.error_code()), r.error_message());
      } else if (r.has_device_comm()) {
        const kolo::v1::DeviceComm& c = r.device_comm();
        DeviceCommPlan comm;
        comm.unique_id = c.unique_id();
        comm.nranks = c.nranks();
        comm.nccl_rank.assign(c.nccl_rank().begin(), c.nccl_rank().end());
        comm.device.assign(c.device().begin(), c.device().end());
        if (absl::Status v = ValidateDeviceCommPlan(comm, options_.hello.size());
            !v.ok() && link_error.empty()) {
          // The other daemons would wait in NCCL for this one: end the job.
          link_error = absl::StrCat("the coordinator ", options_.coordinator_name,
                                    " sent an unusable device communicator: ", v.message());
          ended_ = true;
        }
        e.device_comm = std::move(comm);
      }
      entries.push_back(std::move(e));
    }
  }
  if (!link_error.empty()) {
    listener_->OnLinkAbort(absl::AbortedError(link_error));
    return;
  }
  listener_->OnPlan(std::move(entries));
}

void MemberLink::ReadLoop() {
  kolo::v1::CoordinatorMessage msg;
  std::string why;
  while (channel_->Receive(&msg, &why)) {
    {
      absl::MutexLock l(&mu_);
      last_heard_ = absl::Now();
    }
    switch (msg.msg_case()) {
      case kolo::v1::CoordinatorMessage::kWelcome:
        listener_->OnWelcome(msg.welcome());
        break;
      case kolo::v1::CoordinatorMessage::kPlan:
        HandlePlan(msg.plan());
        break;
      case kolo::v1::CoordinatorMessage::kAbort: {
        {
          absl::MutexLock l(&mu_);
          if (ended_ || held_abort_.has_value()) break;
          if (lane_ != nullptr && msg.abort().plans_sent() > plans_) {
            // Plans sent before it over the lane are still on their way.
            held_abort_ = FromPeerAbort(msg.abort());
            held_abort_plans_ = msg.abort().plans_sent();
            held_abort_deadline_ = absl::Now() + kHeldAbortWait;
            break;
          }
          ended_ = true;
        }
        listener_->OnLinkAbort(FromPeerAbort(msg.abort()));
        break;
      }
      default:
        break;
    }
  }
  bool notify;
  {
    absl::MutexLock l(&mu_);
    // A held abort ends the link itself (HandlePlan or the writer).
    if (held_abort_.has_value()) return;
    notify = !stop_ && !ended_;
    ended_ = true;
  }
  if (notify) {
    listener_->OnLinkAbort(absl::AbortedError(
        absl::StrCat("lost the coordinator ", options_.coordinator_name, ": ", why)));
  }
}

std::optional<absl::Status> MemberLink::TakeDueAbortLocked(absl::Time now) {
  if (!held_abort_.has_value() || ended_ ||
      (plans_ < held_abort_plans_ && now < held_abort_deadline_)) {
    return std::nullopt;
  }
  ended_ = true;
  std::optional<absl::Status> why = std::move(held_abort_);
  held_abort_.reset();
  return why;
}

}  // namespace kolo::daemon
