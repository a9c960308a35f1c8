// The agreement rule: the views of one tensor held by the ranks of a node
// (RequestTable's CheckAgreement) or by the nodes of a job (the
// Coordinator) must be the same in every field that applies to its kind.
//
// Fields are compared in a fixed order and the first difference is
// reported: collective; for a process-set change only its ranks (add) or id
// (remove); then dtype, device or host memory, group size, shape (all but
// the first dimension for allgather and alltoall); the root for broadcast;
// op, scale factors and compression for allreduce and reducescatter. A
// rank's GPU is never compared (each GPU is one NCCL rank).
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "daemon/plan/tensor_desc.h"

namespace kolo::daemon::plan {

// One field on which two views differ, with both values rendered. `field`
// is empty where the values name themselves ("a tensor in host memory").
struct FieldDifference {
  std::string field;
  std::string a;
  std::string b;
};

// The first field on which `a` and `b` differ; nullopt when they agree.
std::optional<FieldDifference> Difference(const TensorDesc& a, const TensorDesc& b);

// FAILED_PRECONDITION for the difference `d` between `a_who`'s view (the
// reference) and `b_who`'s, naming the tensor by its collective `kind` and
// `name`, both senders and both values: `allreduce "x": rank 3 sent shape
// [4,5], rank 0 sent [4,4]` (the coordinator names nodes instead).
absl::Status Disagreement(CollectiveKind kind, absl::string_view name, absl::string_view a_who,
                          absl::string_view b_who, const FieldDifference& d);

}  // namespace kolo::daemon::plan
