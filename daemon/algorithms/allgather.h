// Inter-node allgather of variable-sized blocks over a Transport: node i
// owns `sizes[i]` bytes at `offsets[i]` of every node's buffer; afterwards
// every node's buffer holds every block.
//
// Ring: in step s (0 <= s < n-1) a node sends the block it received last
// (its own at first) to the next node and receives the one before from the
// previous node, so each link carries every block once and the whole
// exchange takes n-1 block times. Blocks travel as one message each (the
// transport moves large messages itself); blocks must not overlap. Arguments
// must agree across nodes, `tag_base` as in allreduce.h. On error the blocks
// of other nodes are unspecified and no transfer is left outstanding.
//
// Thread-safety: reentrant; concurrent calls on one transport need distinct
// tag bases.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/transport/transport.h"

namespace kolo::daemon {

absl::Status RingAllgatherV(Transport& transport, void* buffer,
                            const std::vector<uint64_t>& offsets,
                            const std::vector<uint64_t>& sizes, uint64_t tag_base,
                            absl::Time deadline);

}  // namespace kolo::daemon
