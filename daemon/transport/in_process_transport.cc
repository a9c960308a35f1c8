#include "daemon/transport/in_process_transport.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kolo::daemon {

class InProcessFabric::Endpoint final : public Transport {
 public:
  Endpoint(InProcessFabric* fabric, int node) : fabric_(fabric), node_(node) {}

  int node() const override { return node_; }
  int nodes() const override { return fabric_->nodes(); }
  absl::StatusOr<Ticket> PostSend(int peer, uint64_t tag, const void* data, size_t bytes) override {
    return fabric_->Post(node_, /*is_send=*/true, peer, tag, data, nullptr, bytes);
  }
  absl::StatusOr<Ticket> PostRecv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return fabric_->Post(node_, /*is_send=*/false, peer, tag, nullptr, data, bytes);
  }
  absl::Status Wait(absl::Span<const Ticket> tickets, absl::Time deadline) override {
    return fabric_->Wait(node_, tickets, deadline);
  }
  void Abort(const absl::Status& why) override { fabric_->Abort(node_, why); }

 private:
  InProcessFabric* const fabric_;
  const int node_;
};

InProcessFabric::InProcessFabric(int nodes, bool lanes)
    : states_(nodes), lanes_(lanes), inboxes_(nodes, nullptr) {
  for (int i = 0; i < nodes; ++i) {
    endpoints_.push_back(std::make_unique<Endpoint>(this, i));
  }
}

InProcessFabric::~InProcessFabric() = default;

Transport& InProcessFabric::endpoint(int i) { return *endpoints_.at(i); }

// A job transport's incoming lane messages: queued from any thread, handed
// to the handler in order on the inbox's own thread once started.
class InProcessFabric::Inbox {
 public:
  ~Inbox() {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }
  void SetHandler(MessageLane::Handler handler) {
    absl::MutexLock l(&mu_);
    handler_ = std::move(handler);
  }
  void Start() {
    absl::MutexLock l(&mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  }
  void Push(int from, std::shared_ptr<const std::string> message) {
    absl::MutexLock l(&mu_);
    queue_.emplace_back(from, std::move(message));
  }

 private:
  void Loop() {
    for (;;) {
      std::pair<int, std::shared_ptr<const std::string>> next;
      MessageLane::Handler handler;
      {
        absl::MutexLock l(&mu_);
        auto due = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_ || !queue_.empty(); };
        mu_.Await(absl::Condition(&due));
        if (stop_) return;
        next = std::move(queue_.front());
        queue_.pop_front();
        handler = handler_;
      }
      if (handler) handler(next.first, *next.second);
    }
  }

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  MessageLane::Handler handler_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<int, std::shared_ptr<const std::string>>> queue_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

void InProcessFabric::SetInbox(int node, Inbox* inbox) {
  absl::MutexLock l(&inbox_mu_);
  inboxes_.at(node) = inbox;
}

void InProcessFabric::DeliverMessage(int to, int from, std::shared_ptr<const std::string> message) {
  absl::MutexLock l(&inbox_mu_);
  if (to >= 0 && to < static_cast<int>(inboxes_.size()) && inboxes_[to] != nullptr) {
    inboxes_[to]->Push(from, std::move(message));
  }
}

size_t InProcessFabric::outstanding() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const NodeState& s : states_) n += s.ops.size();
  return n;
}

bool InProcessFabric::AwaitInFlight(absl::Span<const int> nodes, absl::Time deadline) const {
  auto in_flight = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (int node : nodes) {
      bool any = false;
      for (const auto& [ticket, op] : states_.at(node).ops) {
        any = any || !op->done;
      }
      if (!any) return false;
    }
    return true;
  };
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(&in_flight), deadline);
}

absl::StatusOr<Transport::Ticket> InProcessFabric::Post(int node, bool is_send, int peer,
                                                        uint64_t tag, const void* src, void* dst,
                                                        size_t bytes) {
  const char* what = is_send ? "send" : "receive";
  if (peer < 0 || peer >= nodes() || peer == node) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "node %d: %s to/from node %d: not a peer (%d nodes)", node, what, peer, nodes()));
  }
  if (tag >= kTransportTagLimit) {
    return absl::InvalidArgumentError(absl::StrFormat("node %d: %s tag %#x uses more than %d bits",
                                                      node, what, tag, kTransportTagBits));
  }
  if (bytes > 0 && (is_send ? src == nullptr : dst == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("node %d: %s of %d bytes with a null buffer", node, what, bytes));
  }
  absl::MutexLock lock(&mu_);
  NodeState& state = states_[node];
  if (!state.aborted.ok()) return state.aborted;

  const Transport::Ticket ticket = state.next_ticket++;
  auto owned = std::make_unique<Op>();
  Op* op = owned.get();
  *op = Op{.node = node,
           .is_send = is_send,
           .peer = peer,
           .tag = tag,
           .src = src,
           .dst = dst,
           .bytes = bytes};
  state.ops.emplace(ticket, std::move(owned));

  const Key key = is_send ? Key{node, peer, tag} : Key{peer, node, tag};
  auto& counterpart = is_send ? unmatched_recvs_ : unmatched_sends_;
  auto it = counterpart.find(key);
  if (it == counterpart.end() || it->second.empty()) {
    (is_send ? unmatched_sends_ : unmatched_recvs_)[key].push_back(op);
    return ticket;
  }
  Op* other = it->second.front();
  it->second.pop_front();
  if (it->second.empty()) counterpart.erase(it);
  Op* send = is_send ? op : other;
  Op* recv = is_send ? other : op;
  send->done = recv->done = true;
  if (send->bytes != recv->bytes) {
    recv->status = absl::InternalError(
        absl::StrFormat("node %d: receive from node %d tag %#x: got %d bytes, expected %d",
                        recv->node, recv->peer, tag, send->bytes, recv->bytes));
  } else if (send->bytes > 0) {
    std::memcpy(recv->dst, send->src, send->bytes);
  }
  return ticket;
}

void InProcessFabric::CancelLocked(Op& op, const absl::Status& status) {
  if (op.done) return;
  const Key key = op.is_send ? Key{op.node, op.peer, op.tag} : Key{op.peer, op.node, op.tag};
  auto& queues = op.is_send ? unmatched_sends_ : unmatched_recvs_;
  auto it = queues.find(key);
  if (it != queues.end()) {
    auto& q = it->second;
    q.erase(std::remove(q.begin(), q.end(), &op), q.end());
    if (q.empty()) queues.erase(it);
  }
  op.done = true;
  op.status = status;
}

absl::Status InProcessFabric::Wait(int node, absl::Span<const Transport::Ticket> tickets,
                                   absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  NodeState& state = states_[node];
  std::vector<Op*> ops;
  ops.reserve(tickets.size());
  for (Transport::Ticket t : tickets) {
    auto it = state.ops.find(t);
    if (it == state.ops.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("node %d: wait on unknown ticket %d", node, t));
    }
    ops.push_back(it->second.get());
  }
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    bool all_done = true;
    for (const Op* op : ops) {
      if (op->done && !op->status.ok()) return true;
      all_done = all_done && op->done;
    }
    return all_done;
  };
  mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);

  absl::Status result;
  for (const Op* op : ops) {
    if (op->done && !op->status.ok()) {
      result = op->status;
      break;
    }
  }
  size_t late = 0;
  for (Op* op : ops) {
    if (!op->done) {
      ++late;
      CancelLocked(*op, absl::CancelledError("cancelled"));
    }
  }
  if (late > 0 && result.ok()) {
    result = absl::DeadlineExceededError(absl::StrFormat(
        "node %d: %d of %d transfers not complete by the deadline", node, late, tickets.size()));
  }
  for (Transport::Ticket t : tickets) state.ops.erase(t);
  return result;
}

void InProcessFabric::Abort(int node, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  NodeState& state = states_[node];
  if (!state.aborted.ok()) return;
  state.aborted = AbortedTransferStatus(why.ok() ? absl::AbortedError("aborted") : why);
  for (auto& [ticket, op] : state.ops) CancelLocked(*op, state.aborted);
}

namespace {

constexpr absl::string_view kAddressPrefix = "inproc:";

// Lane messages are as small as UCX's.
constexpr size_t kMaxLaneMessageBytes = 256 << 10;

// One fabric node, numbered by the job's node indices once connected.
class InProcessJobTransport final : public JobTransport, public MessageLane {
 public:
  InProcessJobTransport(InProcessFabric* fabric, int fabric_node)
      : fabric_(fabric),
        fabric_node_(fabric_node),
        address_(absl::StrCat(kAddressPrefix, fabric_node)) {
    if (fabric_->lanes()) {
      inbox_ = std::make_unique<InProcessFabric::Inbox>();
      fabric_->SetInbox(fabric_node_, inbox_.get());
    }
  }
  ~InProcessJobTransport() override {
    if (inbox_ != nullptr) fabric_->SetInbox(fabric_node_, nullptr);
  }

  MessageLane* message_lane() override { return inbox_ != nullptr ? this : nullptr; }
  void SetMessageHandler(Handler handler) override { inbox_->SetHandler(std::move(handler)); }
  size_t max_message_bytes() const override { return kMaxLaneMessageBytes; }
  absl::Status SendMessage(int peer, std::shared_ptr<const std::string> message) override {
    if (self_ < 0) return absl::FailedPreconditionError("in-process transport: not connected");
    if (absl::Status s = CheckPeer(peer); !s.ok()) return s;
    if (message == nullptr || message->size() > kMaxLaneMessageBytes) {
      return absl::InvalidArgumentError("in-process transport: a message over 256 KiB");
    }
    {
      absl::MutexLock l(&mu_);
      if (!aborted_.ok()) return aborted_;
    }
    fabric_->DeliverMessage(fabric_nodes_[peer], self_, std::move(message));
    return absl::OkStatus();
  }

  const std::string& address() const override { return address_; }
  absl::Status Connect(std::vector<std::string> addresses, int self) override {
    std::vector<int> nodes;
    for (const std::string& a : addresses) {
      int n = -1;
      if (!absl::StartsWith(a, kAddressPrefix) ||
          !absl::SimpleAtoi(a.substr(kAddressPrefix.size()), &n) || n < 0 ||
          n >= fabric_->nodes()) {
        return absl::InvalidArgumentError(
            absl::StrCat("in-process transport: bad address \"", a, "\""));
      }
      nodes.push_back(n);
    }
    if (self < 0 || self >= static_cast<int>(nodes.size()) || nodes[self] != fabric_node_) {
      return absl::InvalidArgumentError(
          absl::StrCat("in-process transport: node ", self, " is not this endpoint"));
    }
    fabric_nodes_ = std::move(nodes);
    self_ = self;
    if (inbox_ != nullptr) inbox_->Start();
    return absl::OkStatus();
  }
  int node() const override { return self_; }
  int nodes() const override { return static_cast<int>(fabric_nodes_.size()); }
  absl::StatusOr<Ticket> PostSend(int peer, uint64_t tag, const void* data, size_t bytes) override {
    if (absl::Status s = CheckPeer(peer); !s.ok()) return s;
    return endpoint().PostSend(fabric_nodes_[peer], tag, data, bytes);
  }
  absl::StatusOr<Ticket> PostRecv(int peer, uint64_t tag, void* data, size_t bytes) override {
    if (absl::Status s = CheckPeer(peer); !s.ok()) return s;
    return endpoint().PostRecv(fabric_nodes_[peer], tag, data, bytes);
  }
  absl::Status Wait(absl::Span<const Ticket> tickets, absl::Time deadline) override {
    return endpoint().Wait(tickets, deadline);
  }
  void Abort(const absl::Status& why) override {
    {
      absl::MutexLock l(&mu_);
      if (aborted_.ok()) aborted_ = why.ok() ? absl::AbortedError("aborted") : why;
    }
    endpoint().Abort(why);
  }

 private:
  Transport& endpoint() { return fabric_->endpoint(fabric_node_); }
  absl::Status CheckPeer(int peer) const {
    if (peer < 0 || peer >= nodes() || peer == self_) {
      return absl::InvalidArgumentError(absl::StrCat("in-process transport: no peer ", peer));
    }
    return absl::OkStatus();
  }

  InProcessFabric* const fabric_;
  const int fabric_node_;
  const std::string address_;
  // Set by Connect, before any transfer.
  std::vector<int> fabric_nodes_;
  int self_ = -1;
  std::unique_ptr<InProcessFabric::Inbox> inbox_;  // with lanes
  absl::Mutex mu_;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<JobTransport>> InProcessTransportFactory::Create() {
  absl::MutexLock l(&mu_);
  if (next_ >= fabric_->nodes()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("in-process fabric: all ", fabric_->nodes(), " nodes are taken"));
  }
  return std::unique_ptr<JobTransport>(std::make_unique<InProcessJobTransport>(fabric_, next_++));
}

}  // namespace kolo::daemon
