// Inter-node alltoall over a Transport: every node sends one message to each
// other node and receives one from each (a pairwise exchange). What a node's
// message to node j holds is the caller's business (the host multi-node
// backend packs its ranks' rows for j's ranks); the receive sizes must match
// the sizes the senders use, which every node derives from the same plan.
//
// All sends and receives are posted at once and waited on together, so the
// exchange takes one message time when the links allow it (n-1 concurrent
// transfers each way). `send[node()]` and `recv[node()]` are ignored.
// Arguments must agree across nodes; `tag_base` as in allreduce.h. On error
// no transfer is left outstanding and the receive buffers are unspecified.
//
// Thread-safety: reentrant; concurrent calls on one transport need distinct
// tag bases.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/transport/transport.h"

namespace kolo::daemon {

// `send[j]`: the bytes for node j; `recv[j]`: where node j's bytes go (its
// size is exactly what node j sends here). Both have transport.nodes()
// entries.
absl::Status PairwiseAlltoall(Transport& transport,
                              const std::vector<absl::Span<const uint8_t>>& send,
                              const std::vector<absl::Span<uint8_t>>& recv, uint64_t tag_base,
                              absl::Time deadline);

}  // namespace kolo::daemon
