// UcxTransport: the Transport between Kolo daemons over UCX tag matching, for
// host memory.
//
// Use: Create() on every node, exchange worker_address() out of band (the
// daemons do it over gRPC), then Connect() with every node's address.
//
// Threading: one progress thread owns the UCX worker, which is therefore
// created UCS_THREAD_MODE_SINGLE. Callers' threads never touch UCX: PostSend
// and PostRecv queue an operation and wake the progress thread through an
// eventfd; Wait sleeps on a mutex condition that the progress thread
// signals when an operation completes. This was chosen over
// UCS_THREAD_MODE_MULTI because UCX then serialises every call on one worker
// lock anyway, while a single owner makes the request lifetimes, the
// cancellation and the endpoint teardown easy to reason about, and lets the
// owner sleep on the worker's event fd when nothing is pending (idle costs
// no CPU) without another thread racing it for the worker.
//
// Tags: the UCX tag is (sending node << 48) | tag, matched with a full mask,
// so a receive matches exactly one peer's sends of that tag.
//
// Failures:
//   - A broken connection (UCX's endpoint error callback) fails the
//     transfers with that peer, naming it; later sends to it fail at once,
//     later receives from it get only what had arrived before the link
//     went (so a peer that finished and closed cleanly loses nothing it
//     sent). Transfers with the other peers go on: a crashed peer ends the
//     job through the coordinator, which aborts every node's transport.
//   - Receives are cancelled individually. UCX cannot cancel one send, so a
//     send that must be withdrawn (its Wait hit the deadline, or another
//     transfer of the Wait failed) force-closes the endpoint to its peer:
//     later transfers with that peer fail, and the peer sees the connection
//     drop. A deadline is a failed collective, which fails the job anyway.
//   - A stalled data link (transfers with a peer in flight, none completing
//     for options.stall_timeout, while the connection looks alive) aborts
//     the transport with DEADLINE_EXCEEDED-turned-ABORTED naming the peer.
//   - Should UCX keep a withdrawn transfer past options.retire_grace, the
//     Wait shuts the worker down (the progress thread destroys endpoints and
//     worker, after which UCX writes no buffer) and the transport stays
//     aborted: the job fails, the daemon does not.
//
// Thread-safety: all Transport methods are thread-safe. Create, Connect and
// the destructor are called by the owner, once each; destroying the
// transport while another thread is inside Wait is an error.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/unique_fd.h"
#include "daemon/transport/transport.h"
#include "daemon/transport/ucx_handles.h"

namespace kolo::daemon {

struct UcxOptions {
  // How long the destructor may spend flushing endpoints of a healthy
  // transport before tearing them down regardless.
  absl::Duration close_timeout = absl::Seconds(2);
  // Empty progress passes the progress thread makes, while transfers are in
  // flight, before it sleeps on the worker's event fd. Trades CPU for latency.
  int spin_passes = 16;
  // How long transfers with one peer may be in flight without any of them
  // completing before the data link to it counts as stalled: the transport
  // aborts with an error naming the peer. The Peer plane's heartbeats cannot
  // see this (they travel on another connection). Zero turns the watch off.
  absl::Duration stall_timeout = absl::Seconds(60);
  // How long a Wait gives withdrawn transfers to be released by UCX before
  // it shuts the worker down so that no buffer can be written any more.
  absl::Duration retire_grace = absl::Seconds(30);
};

// UCX settings Kolo chooses where the environment does not set them:
// TCP moves data in 512 KiB segments instead of UCX's 64 KiB, so a ring's
// megabyte chunks cross in a few sends each (measured across 2 daemons on
// loopback, 2 cores: 64 MiB allreduce 2.1 -> 2.9 GB/s busbw, 16 MiB 1.7 ->
// 2.7). UCX reads its transports' settings from the environment only, so
// this sets UCX_TCP_TX_SEG_SIZE and UCX_TCP_RX_SEG_SIZE unless set: call it
// before other threads read the environment (kolod: first thing in main; the
// in-process test cluster: where it sets UCX_TLS, before it makes workers).
void SetUcxDefaults();

class UcxTransport final : public JobTransport, public MessageLane {
 public:
  // Reads UCX's configuration from the environment (UCX_TLS is honoured; with
  // UCX 1.13 keep "tcp" in it) and creates the context and worker.
  static absl::StatusOr<std::unique_ptr<UcxTransport>> Create(const UcxOptions& options);
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;
  // Stops the progress thread and closes the endpoints (flushing them unless
  // the transport was aborted), within about options.close_timeout.
  ~UcxTransport() override;

  // This node's worker address, opaque bytes for the peers' Connect().
  const std::string& worker_address() const { return worker_address_; }
  const std::string& address() const override { return worker_address_; }

  // Creates endpoints to every other node; peer_addresses[i] is node i's
  // worker_address() and `self` this node's index (at most 2^16 nodes). Call
  // once, before any transfer.
  absl::Status Connect(std::vector<std::string> peer_addresses, int self) override;

  int node() const override { return node_.load(std::memory_order_acquire); }
  int nodes() const override { return nodes_.load(std::memory_order_acquire); }
  absl::StatusOr<Ticket> PostSend(int peer, uint64_t tag, const void* data, size_t bytes) override;
  absl::StatusOr<Ticket> PostRecv(int peer, uint64_t tag, void* data, size_t bytes) override;
  absl::Status Wait(absl::Span<const Ticket> tickets, absl::Time deadline) override;
  void Abort(const absl::Status& why) override;

  // Messages are UCX active messages sent eagerly (never by rendezvous), so
  // each arrives in one piece on the receiver's progress thread; a small
  // header names the sending node. A message whose send fails is dropped
  // with a warning: its link is gone, and the job ends through the Peer plane.
  MessageLane* message_lane() override { return this; }
  void SetMessageHandler(Handler handler) override;
  absl::Status SendMessage(int peer, std::shared_ptr<const std::string> message) override;
  size_t max_message_bytes() const override;

 private:
  struct Op;
  struct Peer;
  struct TicketState {
    bool done = false;
    absl::Status status;
  };

  UcxTransport(const UcxOptions& options, UcxContext context, UcxWorker worker, std::string address,
               UniqueFd wake_fd, int worker_fd);

  absl::StatusOr<Ticket> Post(std::unique_ptr<Op> op);
  void Wake();

  // --- Progress thread. ---
  void Run();
  void Start(std::unique_ptr<Op> op);
  void Cancel(Ticket ticket, const absl::Status& why);
  void FailPeer(int peer, const absl::Status& why);
  void FailAll(const absl::Status& why);
  void HandleEndpointErrors();
  void Retire();
  void Sleep();
  void CloseEndpoints();
  void CheckStalls();
  void ShutDownWorker();
  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  static void OnRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                         void* user_data);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnMessage(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param);

  const UcxOptions options_;
  // Set once by Connect before the progress thread starts.
  std::atomic<int> node_{-1};
  std::atomic<int> nodes_{0};

  // Owned by the progress thread once it runs (by Connect before, by the
  // destructor after). Declared so that the worker goes before the context
  // and after the endpoints, and the operations UCX may still call back
  // about outlive the worker.
  UcxContext context_;
  absl::flat_hash_map<Ticket, std::unique_ptr<Op>> in_flight_;
  std::vector<Op*> completed_;                                 // filled by UCX callbacks
  std::vector<std::pair<int, ucs_status_t>> endpoint_errors_;  // likewise
  UcxWorker worker_;
  std::vector<std::unique_ptr<Peer>> peers_;  // index = node; null for self
  absl::Status fail_all_status_;              // non-OK once every link was failed
  Handler message_handler_;                   // set before Connect
  uint64_t dropped_messages_ = 0;             // malformed ones, for the log

  const std::string worker_address_;
  const UniqueFd wake_fd_;  // eventfd: new work for the progress thread
  const int worker_fd_;     // owned by the worker

  // Shared between callers and the progress thread.
  absl::Mutex mu_;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Set by a Wait whose withdrawn transfers UCX did not release: the progress
  // thread destroys the worker and exits; `worker_gone_` says it did.
  bool shut_down_worker_ ABSL_GUARDED_BY(mu_) = false;
  bool worker_gone_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  Ticket next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<Ticket, TicketState> tickets_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Op>> submissions_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<Ticket, absl::Status>> cancellations_ ABSL_GUARDED_BY(mu_);

  std::thread progress_thread_;  // last: started by Connect, joined first
};

// Makes a UcxTransport with `options` for each multi-node job.
std::unique_ptr<TransportFactory> MakeUcxTransportFactory(UcxOptions options = {});

}  // namespace kolo::daemon
