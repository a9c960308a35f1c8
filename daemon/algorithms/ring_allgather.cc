#include <cstddef>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/algorithms/allgather.h"
#include "daemon/algorithms/collective_common.h"

namespace kolo::daemon {

absl::Status RingAllgatherV(Transport& transport, void* buffer,
                            const std::vector<uint64_t>& offsets,
                            const std::vector<uint64_t>& sizes, uint64_t tag_base,
                            absl::Time deadline) {
  const char* kWhat = "ring allgather";
  const int n = transport.nodes();
  if (static_cast<int>(offsets.size()) != n || static_cast<int>(sizes.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s on node %d: %d offsets and %d sizes for %d nodes", kWhat,
                        transport.node(), offsets.size(), sizes.size(), n));
  }
  uint64_t total = 0;
  for (int i = 0; i < n; ++i) total += sizes[i];
  KOLO_RETURN_IF_ERROR(
      CheckCollectiveArgs(transport, kWhat, buffer, total, tag_base, /*chunk_bytes=*/1));
  if (n == 1) return absl::OkStatus();
  const int me = transport.node();
  const int next = (me + 1) % n;
  const int prev = (me + n - 1) % n;
  auto* base = static_cast<std::byte*>(buffer);
  PendingTransfers pending(transport, deadline);
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = (me - s + n) % n;
    const int recv_block = (me - s - 1 + 2 * n) % n;
    const uint64_t tag = MessageTag(tag_base, CollectivePhase::kRingAllgatherV, s);
    KOLO_ASSIGN_OR_RETURN(Transport::Ticket recv,
                          pending.Recv(prev, tag, base + offsets[recv_block], sizes[recv_block]));
    KOLO_ASSIGN_OR_RETURN(Transport::Ticket send,
                          pending.Send(next, tag, base + offsets[send_block], sizes[send_block]));
    // The block received now is the one sent in the next step.
    KOLO_RETURN_IF_ERROR(pending.Wait({recv, send}));
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon
