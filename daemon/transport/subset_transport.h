// SubsetTransport: some of a job's nodes seen as a job of their own, so the
// collective algorithms run unchanged among the nodes that host a process
// set's ranks. Node i of the subset is node nodes[i] of the base transport.
//
// Thread-safety: as the base transport's; the subset itself is immutable.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "daemon/transport/transport.h"

namespace kolo::daemon {

class SubsetTransport : public Transport {
 public:
  // `nodes`: base node indices, ascending, including base.node().
  SubsetTransport(Transport& base, std::vector<int> nodes) : base_(base), nodes_(std::move(nodes)) {
    me_ = static_cast<int>(std::find(nodes_.begin(), nodes_.end(), base_.node()) - nodes_.begin());
  }

  // Whether this node is one of the subset's.
  bool member() const { return me_ < static_cast<int>(nodes_.size()); }

  int node() const override { return me_; }
  int nodes() const override { return static_cast<int>(nodes_.size()); }
  absl::StatusOr<Ticket> PostSend(int peer, uint64_t tag, const void* data, size_t bytes) override {
    if (peer < 0 || peer >= nodes()) return OutOfRange(peer);
    return base_.PostSend(nodes_[peer], tag, data, bytes);
  }
  absl::StatusOr<Ticket> PostRecv(int peer, uint64_t tag, void* data, size_t bytes) override {
    if (peer < 0 || peer >= nodes()) return OutOfRange(peer);
    return base_.PostRecv(nodes_[peer], tag, data, bytes);
  }
  absl::Status Wait(absl::Span<const Ticket> tickets, absl::Time deadline) override {
    return base_.Wait(tickets, deadline);
  }
  void Abort(const absl::Status& why) override { base_.Abort(why); }

 private:
  absl::Status OutOfRange(int peer) const {
    return absl::InvalidArgumentError(
        absl::StrCat("node ", peer, " of a subset of ", nodes_.size(), " nodes"));
  }

  Transport& base_;
  const std::vector<int> nodes_;
  int me_ = 0;
};

}  // namespace kolo::daemon
