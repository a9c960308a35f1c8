#include "daemon/transport/ucx_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/link_lost.h"
#include "common/start_thread.h"
#include "daemon/transport/ucx_status.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

constexpr int kNodeShift = kTransportTagBits;
constexpr int kMaxNodes = 1 << (64 - kTransportTagBits);
constexpr ucp_tag_t kFullTagMask = ~ucp_tag_t{0};
// UCX calls made per burst before the progress thread looks at new work.
constexpr int kProgressBurst = 64;
// Longest sleep with transfers in flight: a backstop should a wakeup be lost.
constexpr int kInFlightSleepMs = 100;

// The active message id of MessageLane messages; the header is the sending
// node, 4 bytes little-endian.
constexpr unsigned kMessageAmId = 1;
constexpr size_t kMessageHeaderBytes = 4;
// Longest message: well inside what UCX sends eagerly in one piece.
constexpr size_t kMaxMessageBytes = 256 << 10;

ucp_tag_t WireTag(int sender, uint64_t tag) {
  return (static_cast<ucp_tag_t>(sender) << kNodeShift) | tag;
}

}  // namespace

// One send or receive; owned by the submission queue, then by the progress
// thread's in_flight_ until retired.
struct UcxTransport::Op {
  UcxTransport* transport = nullptr;
  Ticket ticket = 0;
  bool is_send = false;
  // A MessageLane message (a send with no ticket to wait on): its bytes and
  // header live here until UCX is done with them.
  std::shared_ptr<const std::string> message;
  uint8_t header[kMessageHeaderBytes] = {};
  int peer = 0;
  uint64_t tag = 0;
  void* data = nullptr;
  size_t bytes = 0;
  // Progress thread only.
  void* request = nullptr;  // UCX request, freed on retirement
  bool completed = false;   // UCX is done with the buffer
  ucs_status_t ucs = UCS_OK;
  size_t received = 0;
  ucp_tag_recv_info_t info = {};
  absl::Status verdict;  // set when Kolo failed or cancelled the op itself

  std::string Describe() const {
    return absl::StrFormat("node %d: %s node %d (tag %#x, %d bytes)", transport->node(),
                           is_send ? "send to" : "receive from", peer, tag, bytes);
  }
};

// The link to one other node; progress thread only.
struct UcxTransport::Peer {
  UcxTransport* transport = nullptr;
  int node = 0;
  UcxEndpoint ep;
  absl::Status failure;  // non-OK once the link is closed
  // The stall watch: transfers with this peer not yet retired, and when one
  // last completed (or the first of them started).
  int in_flight = 0;
  absl::Time last_progress;
};

void SetUcxDefaults() {
  ::setenv("UCX_TCP_TX_SEG_SIZE", "512k", /*overwrite=*/0);
  ::setenv("UCX_TCP_RX_SEG_SIZE", "512k", /*overwrite=*/0);
}

absl::StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::Create(const UcxOptions& options) {
  absl::StatusOr<UcxContext> context = UcxContext::Create();
  if (!context.ok()) return context.status();
  absl::StatusOr<UcxWorker> worker = UcxWorker::Create(context->get());
  if (!worker.ok()) return worker.status();

  ucp_address_t* address = nullptr;
  size_t length = 0;
  absl::Status s = UcsToStatus(ucp_worker_get_address(worker->get(), &address, &length),
                               "get UCX worker address");
  if (!s.ok()) return s;
  std::string address_bytes(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker->get(), address);

  int worker_fd = -1;
  s = UcsToStatus(ucp_worker_get_efd(worker->get(), &worker_fd), "get UCX worker event fd");
  if (!s.ok()) return s;
  UniqueFd wake_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd.valid()) return ErrnoToStatus(errno, "eventfd for UCX worker");

  return std::unique_ptr<UcxTransport>(
      new UcxTransport(options, std::move(*context), std::move(*worker), std::move(address_bytes),
                       std::move(wake_fd), worker_fd));
}

UcxTransport::UcxTransport(const UcxOptions& options, UcxContext context, UcxWorker worker,
                           std::string address, UniqueFd wake_fd, int worker_fd)
    : options_(options),
      context_(std::move(context)),
      worker_(std::move(worker)),
      worker_address_(std::move(address)),
      wake_fd_(std::move(wake_fd)),
      worker_fd_(worker_fd) {}

UcxTransport::~UcxTransport() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (progress_thread_.joinable()) {
    Wake();
    progress_thread_.join();
  }
  // No progress thread any more: this thread owns the worker. Endpoints not
  // closed by the thread close (forced) in ~Peer, before ~UcxWorker.
  peers_.clear();
}

absl::Status UcxTransport::Connect(std::vector<std::string> peer_addresses, int self) {
  const int n = static_cast<int>(peer_addresses.size());
  if (n < 1 || n > kMaxNodes || self < 0 || self >= n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("UCX connect: node %d of %d nodes (1 to %d nodes)", self, n, kMaxNodes));
  }
  {
    absl::MutexLock lock(&mu_);
    if (connected_) {
      return absl::FailedPreconditionError(
          absl::StrFormat("node %d: UCX transport already connected", self));
    }
  }
  std::vector<std::unique_ptr<Peer>> peers(n);
  for (int p = 0; p < n; ++p) {
    if (p == self) continue;
    peers[p] = std::make_unique<Peer>();
    peers[p]->transport = this;
    peers[p]->node = p;
    ucp_ep_params_t params = {};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(peer_addresses[p].data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &UcxTransport::OnEndpointError;
    params.err_handler.arg = peers[p].get();
    ucp_ep_h ep = nullptr;
    absl::Status s =
        UcsToStatus(ucp_ep_create(worker_.get(), &params, &ep),
                    absl::StrFormat("node %d: create UCX endpoint to node %d", self, p));
    if (!s.ok()) return s;  // `peers` closes the endpoints made so far
    peers[p]->ep = UcxEndpoint(worker_.get(), ep);
  }
  {
    // Before the progress thread runs: the worker is single-threaded. Set
    // even without a handler: UCX 1.13 crashes on an active message that
    // arrives at a worker with none registered.
    ucp_am_handler_param_t am = {};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    am.id = kMessageAmId;
    am.cb = &UcxTransport::OnMessage;
    am.arg = this;
    absl::Status s = UcsToStatus(ucp_worker_set_am_recv_handler(worker_.get(), &am),
                                 absl::StrFormat("node %d: set the UCX message handler", self));
    if (!s.ok()) return s;
  }
  peers_ = std::move(peers);
  node_.store(self, std::memory_order_release);
  nodes_.store(n, std::memory_order_release);
  {
    absl::MutexLock lock(&mu_);
    connected_ = true;
  }
  absl::StatusOr<std::thread> progress =
      StartThread(absl::StrFormat("node %d's UCX progress", self), "kolo-ucx", [this] { Run(); });
  if (!progress.ok()) {
    absl::MutexLock lock(&mu_);
    abort_status_ = AbortedTransferStatus(progress.status());
    return progress.status();
  }
  progress_thread_ = std::move(*progress);
  return absl::OkStatus();
}

absl::StatusOr<Transport::Ticket> UcxTransport::PostSend(int peer, uint64_t tag, const void* data,
                                                         size_t bytes) {
  auto op = std::make_unique<Op>();
  op->is_send = true;
  op->peer = peer;
  op->tag = tag;
  // UCX only reads a send buffer.
  op->data = const_cast<void*>(data);
  op->bytes = bytes;
  return Post(std::move(op));
}

absl::StatusOr<Transport::Ticket> UcxTransport::PostRecv(int peer, uint64_t tag, void* data,
                                                         size_t bytes) {
  auto op = std::make_unique<Op>();
  op->peer = peer;
  op->tag = tag;
  op->data = data;
  op->bytes = bytes;
  return Post(std::move(op));
}

void UcxTransport::SetMessageHandler(Handler handler) { message_handler_ = std::move(handler); }

size_t UcxTransport::max_message_bytes() const { return kMaxMessageBytes; }

absl::Status UcxTransport::SendMessage(int peer, std::shared_ptr<const std::string> message) {
  if (message == nullptr || message->size() > kMaxMessageBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("node %d: a message to node %d of %d bytes (at most %d)", node(), peer,
                        message == nullptr ? 0 : message->size(), kMaxMessageBytes));
  }
  auto op = std::make_unique<Op>();
  op->is_send = true;
  op->peer = peer;
  const uint32_t sender = static_cast<uint32_t>(node());
  for (size_t i = 0; i < kMessageHeaderBytes; ++i) {
    op->header[i] = static_cast<uint8_t>(sender >> (8 * i));
  }
  op->data = const_cast<char*>(message->data());
  op->bytes = message->size();
  op->message = std::move(message);
  absl::StatusOr<Ticket> posted = Post(std::move(op));
  return posted.status();
}

ucs_status_t UcxTransport::OnMessage(void* arg, const void* header, size_t header_length,
                                     void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  uint32_t sender = 0;
  if (header_length == kMessageHeaderBytes) {
    const auto* h = static_cast<const uint8_t*>(header);
    for (size_t i = 0; i < kMessageHeaderBytes; ++i) sender |= uint32_t{h[i]} << (8 * i);
  }
  // Kolo sends eagerly: data by rendezvous, a bad header or an unknown
  // sender is not a Kolo daemon's message. Dropped (UCS_OK releases it).
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0 ||
      header_length != kMessageHeaderBytes || static_cast<int>(sender) == self->node() ||
      sender >= self->peers_.size() || !self->message_handler_) {
    if (self->dropped_messages_++ == 0) {
      spdlog::warn("node {}: dropped a malformed UCX message ({} bytes, header {} bytes)",
                   self->node(), length, header_length);
    }
    return UCS_OK;
  }
  self->message_handler_(static_cast<int>(sender),
                         absl::string_view(static_cast<const char*>(data), length));
  return UCS_OK;
}

absl::StatusOr<Transport::Ticket> UcxTransport::Post(std::unique_ptr<Op> op) {
  op->transport = this;
  const char* what = op->is_send ? "send to" : "receive from";
  const int self = node();
  if (nodes() == 0) {
    return absl::FailedPreconditionError("UCX transport: transfer posted before Connect");
  }
  if (op->peer < 0 || op->peer >= nodes() || op->peer == self) {
    return absl::InvalidArgumentError(absl::StrFormat("node %d: %s node %d: not a peer (%d nodes)",
                                                      self, what, op->peer, nodes()));
  }
  if (op->tag >= kTransportTagLimit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("node %d: %s node %d: tag %#x uses more than %d bits", self, what, op->peer,
                        op->tag, kTransportTagBits));
  }
  if (op->bytes > 0 && op->data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "node %d: %s node %d: null buffer for %d bytes", self, what, op->peer, op->bytes));
  }
  Ticket ticket;
  {
    absl::MutexLock lock(&mu_);
    if (!abort_status_.ok()) return abort_status_;
    if (!connected_ || stopping_) {
      return absl::FailedPreconditionError(
          absl::StrFormat("node %d: UCX transport not connected or shutting down", self));
    }
    ticket = next_ticket_++;
    op->ticket = ticket;
    // A message has no waiter: nothing to publish its end to.
    if (op->message == nullptr) tickets_.emplace(ticket, TicketState{});
    submissions_.push_back(std::move(op));
  }
  Wake();
  return ticket;
}

absl::Status UcxTransport::Wait(absl::Span<const Ticket> tickets, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  for (Ticket t : tickets) {
    if (!tickets_.contains(t)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("node %d: wait on unknown ticket %d", node(), t));
    }
  }
  auto first_error = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (Ticket t : tickets) {
      const TicketState& s = tickets_.at(t);
      if (s.done && !s.status.ok()) return s.status;
    }
    return absl::OkStatus();
  };
  auto all_done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (Ticket t : tickets) {
      if (!tickets_.at(t).done) return false;
    }
    return true;
  };
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return all_done() || !first_error().ok();
  };
  mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);

  absl::Status result = first_error();
  if (!all_done()) {
    // Withdraw the rest, and wait until UCX has let go of their buffers.
    size_t late = 0;
    const absl::Status why = result.ok()
                                 ? absl::DeadlineExceededError(absl::StrFormat(
                                       "node %d: transfer not complete by the deadline", node()))
                                 : absl::CancelledError("cancelled: another transfer failed");
    for (Ticket t : tickets) {
      if (!tickets_.at(t).done) {
        ++late;
        cancellations_.emplace_back(t, why);
      }
    }
    Wake();
    // (No grace at all means not waiting: the cancellations just queued
    // cannot have been taken while this thread holds the lock.)
    const bool released =
        options_.retire_grace > absl::ZeroDuration()
            ? mu_.AwaitWithDeadline(absl::Condition(&all_done), absl::Now() + options_.retire_grace)
            : all_done();
    if (!released) {
      // UCX may still write the callers' buffers: take the worker down, after
      // which it cannot, and leave the transport aborted for good.
      const absl::Status gone = absl::AbortedError(absl::StrFormat(
          "node %d: UCX did not release withdrawn transfers within %s; the transport was shut "
          "down",
          node(), absl::FormatDuration(options_.retire_grace)));
      if (abort_status_.ok()) abort_status_ = gone;
      shut_down_worker_ = true;
      Wake();
      mu_.Await(absl::Condition(&worker_gone_));
      if (result.ok()) result = gone;
    }
    if (result.ok()) {
      result = absl::DeadlineExceededError(
          absl::StrFormat("node %d: %d of %d transfers not complete by the deadline", node(), late,
                          tickets.size()));
    }
  }
  for (Ticket t : tickets) tickets_.erase(t);
  return result;
}

void UcxTransport::Abort(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (!abort_status_.ok()) return;
    abort_status_ = AbortedTransferStatus(why.ok() ? absl::AbortedError("aborted") : why);
  }
  Wake();
}

void UcxTransport::Wake() {
  const uint64_t one = 1;
  // EAGAIN means the counter is already non-zero: the thread will wake.
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
}

// ---------------------------------------------------------------------------
// Progress thread.
//
// Each pass:
//   1. takes queued submissions, the abort status and cancellations;
//   2. starts the submissions on UCX, applies an abort, then cancellations;
//   3. progresses the worker (UCX callbacks record completions and endpoint
//      errors), turns endpoint errors into an abort;
//   4. retires completed operations: frees their requests and publishes
//      their status to waiters;
//   5. when nothing happened, sleeps in poll() on the worker's event fd (after
//      ucp_worker_arm) and the wake eventfd.
// On stop it fails what is left, then closes the endpoints.

void UcxTransport::Run() {
  int idle_passes = 0;
  absl::Time stop_deadline = absl::InfiniteFuture();
  for (;;) {
    std::deque<std::unique_ptr<Op>> submissions;
    std::vector<std::pair<Ticket, absl::Status>> cancellations;
    absl::Status abort;
    bool stopping;
    bool shut_down;
    {
      absl::MutexLock lock(&mu_);
      submissions.swap(submissions_);
      cancellations.swap(cancellations_);
      abort = abort_status_;
      stopping = stopping_;
      shut_down = shut_down_worker_;
    }
    if (shut_down) {
      for (auto& op : submissions) in_flight_.emplace(op->ticket, std::move(op));
      ShutDownWorker();
      return;
    }
    bool busy = !submissions.empty() || !cancellations.empty();
    for (auto& op : submissions) Start(std::move(op));
    if (!abort.ok() && fail_all_status_.ok()) {
      FailAll(abort);
      busy = true;
    }
    for (const auto& [ticket, why] : cancellations) Cancel(ticket, why);
    for (int i = 0; i < kProgressBurst && ucp_worker_progress(worker_.get()); ++i) {
      busy = true;
    }
    HandleEndpointErrors();
    busy = busy || !completed_.empty();
    Retire();
    CheckStalls();

    if (stopping) {
      if (stop_deadline == absl::InfiniteFuture()) {
        stop_deadline = absl::Now() + options_.close_timeout;
      }
      // Failed operations retire within a few passes; the bound only guards
      // against UCX never calling back.
      if (in_flight_.empty() || absl::Now() >= stop_deadline) break;
      if (fail_all_status_.ok()) {
        FailAll(absl::AbortedError(absl::StrFormat("node %d: UCX transport destroyed", node())));
      }
      continue;
    }
    if (busy) {
      idle_passes = 0;
      continue;
    }
    if (!in_flight_.empty() && idle_passes < options_.spin_passes) {
      ++idle_passes;
      continue;
    }
    idle_passes = 0;
    Sleep();
  }
  CloseEndpoints();
}

void UcxTransport::Sleep() {
  const ucs_status_t armed = ucp_worker_arm(worker_.get());
  // UCS_ERR_BUSY: events arrived since the last progress; go round again.
  if (armed == UCS_ERR_BUSY) return;
  pollfd fds[2] = {{.fd = wake_fd_.get(), .events = POLLIN, .revents = 0},
                   {.fd = worker_fd_, .events = POLLIN, .revents = 0}};
  // Should arming ever fail otherwise, poll the worker every millisecond
  // rather than spin.
  const int timeout_ms = armed != UCS_OK ? 1 : in_flight_.empty() ? -1 : kInFlightSleepMs;
  ::poll(fds, armed == UCS_OK ? 2 : 1, timeout_ms);
  if (fds[0].revents & POLLIN) {
    uint64_t count;
    [[maybe_unused]] ssize_t n = ::read(wake_fd_.get(), &count, sizeof(count));
  }
}

void UcxTransport::Start(std::unique_ptr<Op> owned) {
  Op* op = owned.get();
  in_flight_.emplace(op->ticket, std::move(owned));
  Peer* peer = peers_[op->peer].get();
  if (peer->in_flight++ == 0) peer->last_progress = absl::Now();
  if (!fail_all_status_.ok() || (!peer->failure.ok() && op->is_send)) {
    // Racing an abort or a closed link: fail without touching UCX.
    op->completed = true;
    op->verdict = peer->failure.ok() ? fail_all_status_ : peer->failure;
    completed_.push_back(op);
    return;
  }
  // A zero-byte transfer still needs a valid address for UCX.
  static char zero_byte_buffer;
  void* data = op->data != nullptr ? op->data : &zero_byte_buffer;

  ucp_request_param_t param = {};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.user_data = op;
  ucs_status_ptr_t request;
  if (op->message != nullptr) {
    param.cb.send = &UcxTransport::OnSendDone;
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_EAGER;
    request = ucp_am_send_nbx(peer->ep.get(), kMessageAmId, op->header, kMessageHeaderBytes, data,
                              op->bytes, &param);
  } else if (op->is_send) {
    param.cb.send = &UcxTransport::OnSendDone;
    request = ucp_tag_send_nbx(peer->ep.get(), data, op->bytes, WireTag(node(), op->tag), &param);
  } else {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_RECV_INFO;
    param.recv_info.tag_info = &op->info;
    param.cb.recv = &UcxTransport::OnRecvDone;
    request = ucp_tag_recv_nbx(worker_.get(), data, op->bytes, WireTag(op->peer, op->tag),
                               kFullTagMask, &param);
  }
  if (UCS_PTR_IS_ERR(request)) {
    op->completed = true;
    op->verdict = UcsToStatus(UCS_PTR_STATUS(request), op->Describe());
    completed_.push_back(op);
  } else if (request == nullptr) {
    // Completed on the spot (UCX may ignore NO_IMM_CMPL for receives).
    op->completed = true;
    op->received = op->info.length;
    completed_.push_back(op);
  } else {
    op->request = request;
    if (!peer->failure.ok() && !op->completed) {
      // A receive from a peer whose link is gone matches only what arrived
      // before (a peer that finished cleanly flushed its last eager sends
      // into this worker); anything else would never come.
      if (op->verdict.ok()) op->verdict = peer->failure;
      ucp_request_cancel(worker_.get(), request);
    }
  }
}

void UcxTransport::OnSendDone(void* /*request*/, ucs_status_t status, void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  op->completed = true;
  op->ucs = status;
  op->transport->completed_.push_back(op);
}

void UcxTransport::OnRecvDone(void* /*request*/, ucs_status_t status,
                              const ucp_tag_recv_info_t* info, void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  op->completed = true;
  op->ucs = status;
  op->received = (status == UCS_OK && info != nullptr) ? info->length : 0;
  op->transport->completed_.push_back(op);
}

void UcxTransport::OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  Peer* peer = static_cast<Peer*>(arg);
  peer->transport->endpoint_errors_.emplace_back(peer->node, status);
}

void UcxTransport::HandleEndpointErrors() {
  if (endpoint_errors_.empty()) return;
  auto errors = std::move(endpoint_errors_);
  endpoint_errors_.clear();
  // Only the transfers with that peer fail (FailPeer also closes the
  // endpoint by force, as UCX wants for one in error). A peer that finished
  // its part and closed cleanly left its last eager messages in this worker,
  // where later receives still find them; transfers with the other peers go
  // on. A crashed peer ends the job through the coordinator, which aborts
  // every node's transport.
  for (const auto& [peer, status] : errors) {
    FailPeer(peer, AbortedTransferStatus(UcsToStatus(status, LinkLostMessage(node(), peer))));
  }
}

void UcxTransport::Cancel(Ticket ticket, const absl::Status& why) {
  auto it = in_flight_.find(ticket);
  if (it == in_flight_.end() || it->second->completed) return;
  Op* op = it->second.get();
  if (op->verdict.ok()) op->verdict = why;
  if (!op->is_send) {
    // An unmatched receive is cancelled on the spot. One already matched to a
    // message in transit cannot be; then only closing the link stops it.
    ucp_request_cancel(worker_.get(), op->request);
    if (op->completed) return;
  }
  FailPeer(op->peer,
           absl::Status(why.code(), absl::StrFormat("node %d: link to node %d closed after "
                                                    "a transfer with it was withdrawn (%s)",
                                                    node(), op->peer, why.message())));
}

void UcxTransport::FailPeer(int node, const absl::Status& why) {
  Peer* peer = peers_[node].get();
  if (peer == nullptr || !peer->failure.ok()) return;
  peer->failure = why;
  for (auto& [ticket, op] : in_flight_) {
    if (op->peer != node || op->completed) continue;
    if (op->verdict.ok()) op->verdict = why;
    if (!op->is_send) ucp_request_cancel(worker_.get(), op->request);
  }
  // Completes the endpoint's sends with UCS_ERR_CANCELED.
  peer->ep.Close(/*force=*/true, absl::Now() + absl::Seconds(1));
}

void UcxTransport::FailAll(const absl::Status& why) {
  fail_all_status_ = why;
  for (size_t p = 0; p < peers_.size(); ++p) FailPeer(static_cast<int>(p), why);
}

void UcxTransport::Retire() {
  if (completed_.empty()) return;
  // A transfer that failed because its connection broke means the peer is
  // gone, whether or not UCX has called the endpoint error handler yet: abort
  // as that handler would, so every node reports the same kind of failure.
  for (Op* op : completed_) {
    if (op->verdict.ok() && op->ucs != UCS_OK &&
        UcsToStatus(op->ucs, "").code() == absl::StatusCode::kUnavailable) {
      endpoint_errors_.emplace_back(op->peer, op->ucs);
    }
  }
  HandleEndpointErrors();  // may complete more operations
  for (Op* op : completed_) {
    if (op->verdict.ok() && op->ucs != UCS_OK &&
        UcsToStatus(op->ucs, "").code() == absl::StatusCode::kUnavailable) {
      const Peer* peer = peers_[op->peer].get();
      op->verdict = peer != nullptr && !peer->failure.ok() ? peer->failure : fail_all_status_;
    }
  }
  std::vector<std::pair<Ticket, absl::Status>> results;
  results.reserve(completed_.size());
  const absl::Time now = absl::Now();
  for (Op* op : completed_) {
    if (Peer* peer = peers_[op->peer].get(); peer != nullptr) {
      --peer->in_flight;
      peer->last_progress = now;
    }
    absl::Status status;
    if (!op->verdict.ok() && (op->ucs != UCS_OK || op->request == nullptr)) {
      // Kolo failed it before UCX saw it, or withdrew it: that reason beats
      // UCX's CANCELED. (One that completed before the withdrawal took
      // effect falls through and reports what UCX did.)
      status = op->verdict;
    } else if (op->ucs != UCS_OK) {
      status = UcsToStatus(op->ucs, op->Describe());
    } else if (!op->is_send && op->received != op->bytes) {
      status =
          absl::InternalError(absl::StrFormat("%s: got %d bytes", op->Describe(), op->received));
    }
    if (op->request != nullptr) ucp_request_free(op->request);
    if (op->message != nullptr) {
      if (!status.ok()) {
        spdlog::warn("node {}: a message to node {} was not sent: {}", node(), op->peer,
                     status.ToString());
      }
      in_flight_.erase(op->ticket);
      continue;
    }
    results.emplace_back(op->ticket, std::move(status));
    in_flight_.erase(op->ticket);
  }
  completed_.clear();
  absl::MutexLock lock(&mu_);
  for (auto& [ticket, status] : results) {
    auto it = tickets_.find(ticket);
    if (it == tickets_.end()) continue;  // cannot happen: Wait erases after done
    it->second.done = true;
    it->second.status = std::move(status);
  }
}

void UcxTransport::CheckStalls() {
  if (options_.stall_timeout <= absl::ZeroDuration() || !fail_all_status_.ok()) return;
  const absl::Time now = absl::Now();
  for (const auto& peer : peers_) {
    if (peer == nullptr || peer->in_flight == 0 || !peer->failure.ok() ||
        now - peer->last_progress < options_.stall_timeout) {
      continue;
    }
    absl::Status abort;
    {
      absl::MutexLock lock(&mu_);
      if (abort_status_.ok()) {
        // A link that moves nothing is a lost link (common/link_lost.h):
        // an elastic job goes on without the node, as when it dies.
        abort_status_ = absl::AbortedError(absl::StrFormat(
            "%s: the data link stalled: %d transfers with it in flight and none completed for %s",
            LinkLostMessage(node(), peer->node), peer->in_flight,
            absl::FormatDuration(now - peer->last_progress)));
      }
      abort = abort_status_;
    }
    FailAll(abort);
    return;
  }
}

void UcxTransport::ShutDownWorker() {
  // Every link closes by force (UCX completes what it can as cancelled), then
  // the worker goes: after ucp_worker_destroy no callback runs and no buffer
  // is written, so the operations are dropped without ucp_request_free.
  absl::Status why;
  {
    absl::MutexLock lock(&mu_);
    why = abort_status_;
  }
  if (fail_all_status_.ok()) FailAll(why);
  for (int i = 0; i < kProgressBurst && ucp_worker_progress(worker_.get()); ++i) {
  }
  peers_.clear();
  worker_ = UcxWorker();
  completed_.clear();
  endpoint_errors_.clear();
  std::vector<Ticket> abandoned;
  for (const auto& [ticket, op] : in_flight_) abandoned.push_back(ticket);
  in_flight_.clear();
  absl::MutexLock lock(&mu_);
  for (Ticket t : abandoned) {
    auto it = tickets_.find(t);
    if (it == tickets_.end() || it->second.done) continue;
    it->second.done = true;
    it->second.status = why;
  }
  worker_gone_ = true;
}

void UcxTransport::CloseEndpoints() {
  bool force;
  {
    absl::MutexLock lock(&mu_);
    force = !abort_status_.ok();
  }
  const absl::Time deadline = absl::Now() + options_.close_timeout;
  for (auto& peer : peers_) {
    if (peer != nullptr) peer->ep.Close(force, deadline);
  }
}

namespace {

class UcxTransportFactory final : public TransportFactory {
 public:
  explicit UcxTransportFactory(UcxOptions options) : options_(options) {}
  absl::StatusOr<std::unique_ptr<JobTransport>> Create() override {
    absl::StatusOr<std::unique_ptr<UcxTransport>> t = UcxTransport::Create(options_);
    if (!t.ok()) return t.status();
    return std::unique_ptr<JobTransport>(std::move(*t));
  }

 private:
  const UcxOptions options_;
};

}  // namespace

std::unique_ptr<TransportFactory> MakeUcxTransportFactory(UcxOptions options) {
  return std::make_unique<UcxTransportFactory>(options);
}

}  // namespace kolo::daemon
