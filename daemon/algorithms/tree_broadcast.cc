// Binomial-tree broadcast.
//
// Protocol, for n nodes, with v = (node - root) mod n the node's position:
//   1. The parent of v > 0 is v minus its lowest set bit; its children are
//      v + m for each power of two m below that bit (below n for the root)
//      with v + m < n.
//   2. For each chunk c in order: a non-root node receives c from its parent
//      into the buffer; then every node sends c to each child.
// Receives run up to kWindow chunks ahead and sends of up to kWindow chunks
// stay in flight, so chunks flow down the tree in a pipeline. Message
// indices are chunk numbers: every link carries each chunk once.

#include <algorithm>
#include <cstddef>
#include <deque>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/algorithms/broadcast.h"
#include "daemon/algorithms/collective_common.h"

namespace kolo::daemon {
namespace {

constexpr size_t kWindow = 3;

}  // namespace

absl::Status TreeBroadcast(Transport& transport, void* buffer, size_t bytes, int root_node,
                           uint64_t tag_base, absl::Time deadline, size_t chunk_bytes) {
  const char* kWhat = "tree broadcast";
  KOLO_RETURN_IF_ERROR(CheckCollectiveArgs(transport, kWhat, buffer, bytes, tag_base, chunk_bytes));
  const int n = transport.nodes();
  if (root_node < 0 || root_node >= n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s on node %d: root node %d out of range (%d nodes)", kWhat,
                        transport.node(), root_node, n));
  }
  if (n == 1 || bytes == 0) return absl::OkStatus();

  const int v = (transport.node() - root_node + n) % n;
  auto real = [&](int pos) { return (pos + root_node) % n; };
  int parent = -1;
  int low_bit = 1;  // lowest set bit of v; past n for the root
  while (low_bit < n && (v & low_bit) == 0) low_bit <<= 1;
  if (v != 0) parent = real(v - low_bit);
  std::vector<int> children;
  for (int m = low_bit >> 1; m > 0; m >>= 1) {
    if (v + m < n) children.push_back(real(v + m));
  }

  auto* base = static_cast<std::byte*>(buffer);
  const size_t chunks = (bytes + chunk_bytes - 1) / chunk_bytes;
  auto chunk_size = [&](size_t c) { return std::min(chunk_bytes, bytes - c * chunk_bytes); };
  PendingTransfers pending(transport, deadline);
  std::deque<Transport::Ticket> recvs;
  std::deque<std::vector<Transport::Ticket>> sends;  // per chunk
  size_t next_recv = 0;
  for (size_t c = 0; c < chunks; ++c) {
    if (parent >= 0) {
      for (; next_recv < chunks && next_recv < c + kWindow; ++next_recv) {
        KOLO_ASSIGN_OR_RETURN(
            Transport::Ticket t,
            pending.Recv(parent, MessageTag(tag_base, CollectivePhase::kTreeBroadcast, next_recv),
                         base + next_recv * chunk_bytes, chunk_size(next_recv)));
        recvs.push_back(t);
      }
      const Transport::Ticket t = recvs.front();
      recvs.pop_front();
      KOLO_RETURN_IF_ERROR(pending.Wait({t}));
    }
    if (children.empty()) continue;
    if (sends.size() == kWindow) {
      KOLO_RETURN_IF_ERROR(pending.Wait(sends.front()));
      sends.pop_front();
    }
    std::vector<Transport::Ticket> chunk_sends;
    for (int child : children) {
      KOLO_ASSIGN_OR_RETURN(
          Transport::Ticket t,
          pending.Send(child, MessageTag(tag_base, CollectivePhase::kTreeBroadcast, c),
                       base + c * chunk_bytes, chunk_size(c)));
      chunk_sends.push_back(t);
    }
    sends.push_back(std::move(chunk_sends));
  }
  for (; !sends.empty(); sends.pop_front()) {
    KOLO_RETURN_IF_ERROR(pending.Wait(sends.front()));
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon
