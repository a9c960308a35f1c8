// Transport: point-to-point transfers between the daemons (nodes) of one job.
//
// This is the seam between Kolo's collective algorithms (daemon/algorithms/)
// and the wire. Implementations: UcxTransport (host memory over UCX) and
// InProcessTransport (a fake joining N nodes inside one process, for tests).
//
// Contract common to every implementation:
//   - A transfer is a send or a receive of a byte range. A receive of `bytes`
//     from `peer` under `tag` matches a send of the same tag from that peer;
//     the sizes must agree (a mismatch fails the receive with INTERNAL).
//     Transfers with the same (peer, tag) match in the order they were posted.
//   - Tags are below 2^kTransportTagBits. The bits above are the transport's:
//     UCX matches on one 64-bit tag per worker, so UcxTransport folds the
//     sending node into them. Larger tags are rejected with INVALID_ARGUMENT.
//   - `peer` is another node of the job (never node() itself).
//   - Zero-byte transfers are allowed; a null pointer is fine for them.
//   - Every ticket must be passed to Wait exactly once. When Wait returns,
//     whatever its result, its tickets are retired: the transport no longer
//     reads or writes their buffers and the ticket numbers mean nothing.
//   - When a ticket of a Wait fails, the others of that Wait are cancelled and
//     Wait returns the failure. A Wait whose deadline has already passed
//     cancels whatever is not yet complete (algorithms use this to withdraw
//     their outstanding transfers on an error path).
//
// Thread-safety: all methods may be called from any thread; a ticket is
// waited on by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace kolo::daemon {

// Width of the tags callers may use (see the contract above).
inline constexpr int kTransportTagBits = 48;
inline constexpr uint64_t kTransportTagLimit = uint64_t{1} << kTransportTagBits;

// Point-to-point transfers between the daemons (nodes) of one job.
class Transport {
 public:
  using Ticket = uint64_t;
  virtual ~Transport() = default;
  virtual int node() const = 0;   // this node's index
  virtual int nodes() const = 0;  // how many nodes
  // Posts a send of `bytes` to `peer` under `tag` (the buffer must stay valid
  // until Wait returns) / a receive of exactly `bytes` from `peer` under
  // `tag`.
  virtual absl::StatusOr<Ticket> PostSend(int peer, uint64_t tag, const void* data,
                                          size_t bytes) = 0;
  virtual absl::StatusOr<Ticket> PostRecv(int peer, uint64_t tag, void* data, size_t bytes) = 0;
  // Waits for every ticket; the first error, ABORTED after Abort(),
  // DEADLINE_EXCEEDED at `deadline` (then the tickets are cancelled).
  virtual absl::Status Wait(absl::Span<const Ticket> tickets, absl::Time deadline) = 0;
  // Fails every pending and future transfer with `why` (e.g. a peer died).
  // Transfers then fail with ABORTED carrying `why`'s message. Thread-safe.
  virtual void Abort(const absl::Status& why) = 0;
};

// The status transfers fail with once a transport was aborted for `why`.
inline absl::Status AbortedTransferStatus(const absl::Status& why) {
  if (why.code() == absl::StatusCode::kAborted) return why;
  return absl::AbortedError(why.ToString());
}

}  // namespace kolo::daemon

namespace kolo::daemon {

// Short messages between the daemons of a job, beside its transfers: the
// negotiation's steady state travels here instead of over the Peer plane
// (see member_link.h). A message reaches its peer whole and in order after
// the messages sent to that peer before it, or not at all once the link to
// the peer fails (the job then ends through the Peer plane).
//
// Thread-safety: thread-safe; the handler runs on the transport's own thread.
class MessageLane {
 public:
  using Handler = std::function<void(int peer, absl::string_view message)>;
  virtual ~MessageLane() = default;
  // Where messages from the peers go; set once, before Connect. The handler
  // must not block or wait for transfers: it runs on the thread that moves
  // them. A message from a peer arrives only once that peer connected.
  virtual void SetMessageHandler(Handler handler) = 0;
  // Queues `message` for `peer` (FAILED_PRECONDITION before Connect,
  // INVALID_ARGUMENT past max_message_bytes or for a non-peer, the abort's
  // status once aborted). Does not block.
  virtual absl::Status SendMessage(int peer, std::shared_ptr<const std::string> message) = 0;
  virtual size_t max_message_bytes() const = 0;
};

// A job's transport before it knows its peers. Its address() travels to the
// coordinator in the node's Hello; Connect() joins the nodes the Welcome
// lists (addresses[i] is node i's address(), `self` this node's index).
// Connect is called once, before any transfer.
class JobTransport : public Transport {
 public:
  virtual const std::string& address() const = 0;
  virtual absl::Status Connect(std::vector<std::string> addresses, int self) = 0;
  // The transport's message lane, or null where it has none (the in-process
  // fabric of unit tests): the negotiation then stays on the Peer plane.
  virtual MessageLane* message_lane() { return nullptr; }
};

// Makes one JobTransport per multi-node job: UCX in kolod, an in-process
// fabric in unit tests (so a job across nodes runs in one process).
//
// Thread-safety: Create may be called from any thread.
class TransportFactory {
 public:
  virtual ~TransportFactory() = default;
  virtual absl::StatusOr<std::unique_ptr<JobTransport>> Create() = 0;
};

}  // namespace kolo::daemon
