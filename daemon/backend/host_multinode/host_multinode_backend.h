// HostMultinodeBackend: runs a multi-node job's host-memory responses on this
// node. Each response is reduced among this node's ranks first (shared
// memory, into a fusion buffer or straight in a single rank's output), then
// an algorithm from daemon/algorithms/ runs among the nodes over the job's
// Transport (ring allreduce, tree broadcast, ring allgather, pairwise
// alltoall), and the result is laid out in every local rank's output or
// result area as on one node. A process set's response runs among the nodes
// of its ranks over a subset view of the transport. A node whose ranks all
// joined takes part with zeros (allreduce) or as a relay (broadcast), laid
// out from the member sizes in the step context.
//
// Thread-safety: thread-compatible; the job's executor calls Execute from one
// thread at a time (the transport may be aborted from any thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/backend/backend.h"
#include "daemon/transport/subset_transport.h"
#include "daemon/transport/transport.h"

namespace kolo::daemon {

class HostMultinodeBackend final : public Backend {
 public:
  // `transport` (connected) must outlive the backend; `node_of` is the node
  // index of every global rank.
  HostMultinodeBackend(Transport* transport, std::vector<int> node_of);

  absl::string_view name() const override { return "ucx"; }
  absl::Status Execute(Response& response, const StepContext& step) override;

 private:
  // The nodes the response's process set spans, and the transport among them.
  void SelectNodes(const StepContext& step);
  absl::Status RunAsJoined(const Response& response, const StepContext& step, uint64_t tag_base);
  absl::Status RunAllreduce(Response& response, uint64_t tag_base);
  // op adasum: each tensor's tree over this node's ranks into the fusion
  // buffer, then AdasumAmongNodes, then the result to every rank.
  absl::Status RunAdasum(Response& response, uint64_t tag_base);
  // Adasum of the fusion buffer's `total` bytes among the nodes, a tensor
  // starting at each of `offsets`.
  // Each member's result in the fusion buffer to every local rank's output,
  // multiplied by `scale`.
  absl::Status CopyOut(const Response& response, double scale);
  absl::Status AdasumAmongNodes(DType dtype, absl::Span<const uint64_t> offsets, uint64_t total,
                                uint64_t tag_base);
  absl::Status RunBroadcast(Response& response, uint64_t tag_base);
  absl::Status RunAllgather(Response& response, const std::vector<int64_t>& rows,
                            uint64_t tag_base);
  absl::Status RunAlltoall(Response& response, const std::vector<int64_t>& splits,
                           uint64_t tag_base);
  absl::Status RunReducescatter(Response& response, uint64_t tag_base);
  // Reduces the local ranks' contributions into the fusion buffer (at the
  // planned offsets), then allreduces it among the nodes; `postscale` is
  // what the results still need (average divides by the set's size).
  absl::Status ReduceAmongNodes(const Response& response, uint64_t tag_base, double* postscale);
  absl::Status ReduceLocalRanks(const Response& response);
  absl::Status AllreduceFusionBuffer(const Response& response, uint64_t total, uint64_t tag_base);

  Transport* const transport_;
  const std::vector<int> node_of_;  // node index by global rank
  std::vector<int> all_ranks_;      // 0 .. size-1

  // For the response being executed: the set's ranks (ascending), their
  // nodes numbered within the active transport, and that transport.
  const std::vector<int>* members_ = nullptr;
  std::vector<int> subset_node_of_;
  const std::vector<int>* active_node_of_ = nullptr;
  std::unique_ptr<SubsetTransport> subset_;
  Transport* active_ = nullptr;
  ResultAllocator* results_ = nullptr;  // where new tensors go

  std::vector<uint8_t> fusion_buffer_;
  std::vector<uint16_t> wire_buffer_;  // compressed data
};

}  // namespace kolo::daemon
