#include "daemon/algorithms/allreduce.h"

namespace kolo::daemon {

absl::Status Allreduce(Transport& transport, void* buffer, size_t count, DType dtype, ReduceOp op,
                       uint64_t tag_base, absl::Time deadline, size_t chunk_bytes) {
  // Every node sees the same count and dtype, so all pick the same algorithm.
  // An invalid dtype has size 0 here and is rejected by either algorithm.
  const size_t bytes = count * DTypeSize(dtype);
  if (bytes <= kRecursiveDoublingMaxBytes) {
    return RecursiveDoublingAllreduce(transport, buffer, count, dtype, op, tag_base, deadline,
                                      chunk_bytes);
  }
  return RingAllreduce(transport, buffer, count, dtype, op, tag_base, deadline, chunk_bytes);
}

}  // namespace kolo::daemon
