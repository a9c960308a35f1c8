// Inter-node broadcast over a Transport: `bytes` of `root_node`'s buffer end
// up in every node's buffer.
//
// Binomial tree rooted at `root_node`, pipelined in chunks of `chunk_bytes`:
// a node forwards chunk c to its children as soon as it has received it, so
// large buffers take about log2(n) chunk times plus one buffer time. No
// scratch memory. Arguments must agree across nodes, `tag_base` as in
// allreduce.h. On error the non-root buffers are unspecified and no transfer
// is left outstanding.
//
// Thread-safety: reentrant; concurrent calls on one transport need distinct
// tag bases.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/algorithms/allreduce.h"
#include "daemon/transport/transport.h"

namespace kolo::daemon {

absl::Status TreeBroadcast(Transport& transport, void* buffer, size_t bytes, int root_node,
                           uint64_t tag_base, absl::Time deadline,
                           size_t chunk_bytes = kDefaultChunkBytes);

}  // namespace kolo::daemon
