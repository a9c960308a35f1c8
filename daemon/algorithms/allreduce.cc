#include "daemon/algorithms/allreduce.h"

#include <vector>

#include "common/status_macros.h"
#include "daemon/algorithms/collective_common.h"
#include "kernels/cpu/reduce.h"

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

absl::Status Allreduce(Transport& transport, const PiecedBuffer& buffer, DType dtype, ReduceOp op,
                       double postscale, uint64_t tag_base, absl::Time deadline,
                       size_t chunk_bytes) {
  if (buffer.bytes() > kRecursiveDoublingMaxBytes) {
    return RingAllreduce(transport, buffer, dtype, op, postscale, tag_base, deadline, chunk_bytes);
  }
  const size_t esize = DTypeSize(dtype);
  KOLO_RETURN_IF_ERROR(CheckReduction(transport, "allreduce", dtype, op));
  KOLO_RETURN_IF_ERROR(buffer.Check("allreduce", transport.node(), esize));
  std::vector<std::byte> packed;
  std::byte* data = buffer.piece_count() == 1 ? buffer.piece(0).data : nullptr;
  if (buffer.piece_count() > 1) {
    packed.resize(buffer.bytes());
    buffer.Gather(0, buffer.bytes(), packed.data());
    data = packed.data();
  }
  const size_t count = buffer.bytes() / esize;
  KOLO_RETURN_IF_ERROR(RecursiveDoublingAllreduce(transport, data, count, dtype, op, tag_base,
                                                  deadline, chunk_bytes));
  if (postscale != 1.0 && count > 0) {
    void* dsts[] = {data};
    KOLO_RETURN_IF_ERROR(kernels::ScaleCopy(dtype, data, dsts, count, postscale));
  }
  if (!packed.empty()) buffer.Scatter(0, buffer.bytes(), packed.data());
  return absl::OkStatus();
}

}  // namespace kolo::daemon
