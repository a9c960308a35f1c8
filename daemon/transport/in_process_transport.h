// InProcessFabric: the Transport fake. It joins N nodes living in one process
// (one thread or more per node) and moves bytes between them with memcpy.
//
// A send and a receive match on (source, destination, tag) in posting order.
// The copy happens when the second of the pair is posted, and both complete
// then; a send never completes before its receive is posted. This is stricter
// than UCX, whose small sends complete at once (eager), so an algorithm that
// passes here does not depend on eager buffering.
//
// Thread-safety: InProcessFabric and its endpoints are thread-safe; one mutex
// guards the whole fabric.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/transport/transport.h"

namespace kolo::daemon {

class InProcessFabric {
 public:
  // With `lanes`, every job transport of the fabric has a message lane (as
  // UCX's does): messages go whole and in order per peer, handed to the
  // receiver's handler on a thread of its own once it connected.
  explicit InProcessFabric(int nodes, bool lanes = false);
  InProcessFabric(const InProcessFabric&) = delete;
  InProcessFabric& operator=(const InProcessFabric&) = delete;
  ~InProcessFabric();

  int nodes() const { return static_cast<int>(endpoints_.size()); }
  // The endpoint of node `i`; owned by the fabric, valid while it lives.
  Transport& endpoint(int i);

  // How many transfers are posted and not yet retired by Wait, over all
  // nodes. Lets tests check that algorithms leave nothing behind.
  size_t outstanding() const;

  // Blocks until each of `nodes` has a posted transfer still incomplete (so
  // each is inside a collective, waiting on the wire), or until `deadline`.
  // Returns whether that happened. For tests that act mid-collective.
  bool AwaitInFlight(absl::Span<const int> nodes, absl::Time deadline) const;

  bool lanes() const { return lanes_; }
  // Lanes: where fabric node `node`'s messages go (null: nowhere, dropped).
  class Inbox;
  void SetInbox(int node, Inbox* inbox);
  // Lanes: hands `message` from job node `from` to fabric node `to`.
  void DeliverMessage(int to, int from, std::shared_ptr<const std::string> message);

 private:
  class Endpoint;
  struct Op {
    int node = 0;  // the node that posted it
    bool is_send = false;
    int peer = 0;
    uint64_t tag = 0;
    const void* src = nullptr;
    void* dst = nullptr;
    size_t bytes = 0;
    bool done = false;
    absl::Status status;
  };
  struct NodeState {
    absl::Status aborted;  // non-OK once Abort() was called
    Transport::Ticket next_ticket = 1;
    absl::flat_hash_map<Transport::Ticket, std::unique_ptr<Op>> ops;
  };
  // (source node, destination node, tag).
  using Key = std::tuple<int, int, uint64_t>;

  absl::StatusOr<Transport::Ticket> Post(int node, bool is_send, int peer, uint64_t tag,
                                         const void* src, void* dst, size_t bytes);
  absl::Status Wait(int node, absl::Span<const Transport::Ticket> tickets, absl::Time deadline);
  void Abort(int node, const absl::Status& why);
  // Withdraws an unmatched op from its queue and completes it with `status`.
  void CancelLocked(Op& op, const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<NodeState> states_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, std::deque<Op*>> unmatched_sends_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, std::deque<Op*>> unmatched_recvs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Endpoint>> endpoints_;  // fixed after ctor
  const bool lanes_;
  absl::Mutex inbox_mu_;
  std::vector<Inbox*> inboxes_ ABSL_GUARDED_BY(inbox_mu_);  // by fabric node
};

// The TransportFactory over an InProcessFabric: each Create() takes the next
// free node of the fabric (its address names that node), and Connect() maps
// the job's node indices (the Welcome's order) onto fabric nodes, so the
// daemons of a multi-node job can live in one process in unit tests.
//
// Thread-safety: thread-safe.
class InProcessTransportFactory final : public TransportFactory {
 public:
  // `fabric` must outlive the factory and every transport it made.
  explicit InProcessTransportFactory(InProcessFabric* fabric) : fabric_(fabric) {}
  absl::StatusOr<std::unique_ptr<JobTransport>> Create() override;

 private:
  InProcessFabric* const fabric_;
  absl::Mutex mu_;
  int next_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kolo::daemon
