#include "daemon/algorithms/alltoall.h"

#include "absl/strings/str_cat.h"
#include "daemon/algorithms/collective_common.h"

namespace kolo::daemon {

absl::Status PairwiseAlltoall(Transport& transport,
                              const std::vector<absl::Span<const uint8_t>>& send,
                              const std::vector<absl::Span<uint8_t>>& recv, uint64_t tag_base,
                              absl::Time deadline) {
  const int nodes = transport.nodes();
  const int me = transport.node();
  if (static_cast<int>(send.size()) != nodes || static_cast<int>(recv.size()) != nodes) {
    return absl::InvalidArgumentError(absl::StrCat("alltoall: ", send.size(), " send and ",
                                                   recv.size(), " receive buffers for ", nodes,
                                                   " nodes"));
  }
  PendingTransfers pending(transport, deadline);
  std::vector<Transport::Ticket> tickets;
  const uint64_t tag = MessageTag(tag_base, CollectivePhase::kAlltoall, 0);
  for (int b = 0; b < nodes; ++b) {
    if (b == me) continue;
    absl::StatusOr<Transport::Ticket> r = pending.Recv(b, tag, recv[b].data(), recv[b].size());
    if (!r.ok()) return r.status();
    tickets.push_back(*r);
    absl::StatusOr<Transport::Ticket> s = pending.Send(b, tag, send[b].data(), send[b].size());
    if (!s.ok()) return s.status();
    tickets.push_back(*s);
  }
  return pending.Wait(tickets);
}

}  // namespace kolo::daemon
