// TensorDesc: one tensor as the negotiation sees it, whether the view is one
// rank's Request (agreement between the ranks of a node) or one node's
// kolo::v1::TensorMeta (agreement between nodes). The agreement and fusion
// rules (agreement.h, fusion.h) are written once over it.
//
// Thread-safety: plain data and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/core/request.h"
#include "proto/kolo/abi/collective_traits.h"
#include "proto/kolo/abi/types.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon::plan {

struct TensorDesc {
  CollectiveKind kind = CollectiveKind::kAllreduce;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::vector<int64_t> shape;
  double prescale = 1.0;
  double postscale = 1.0;
  int root_rank = 0;
  Compression compression = Compression::kNone;
  // Device (CUDA) memory rather than host memory.
  bool on_device = false;
  // The rank's CUDA device, for messages only (ranks on different GPUs
  // agree: each GPU is one NCCL rank); -1 where unknown (a node's view).
  int device = -1;
  int process_set = 0;
  // > 1: negotiated with its group as one unit; 0 where the sender did not
  // say (an older node).
  uint32_t group_size = 0;
  // add_process_set: the set's ranks; remove_process_set: its id (both
  // compared). Other kinds' aux (alltoall splits, a join's last rank) is
  // carried, never compared.
  std::vector<int64_t> aux;
  uint64_t bytes = 0;
};

TensorDesc DescOf(const Request& r);
TensorDesc DescOf(const kolo::v1::TensorMeta& m);

}  // namespace kolo::daemon::plan
