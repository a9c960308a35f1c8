#include "daemon/plan/agreement.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon::plan {
namespace {

std::string List(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

std::string Memory(const TensorDesc& d) {
  if (!d.on_device) return "a tensor in host memory";
  if (d.device < 0) return "a tensor in device memory";
  return absl::StrCat("a tensor on CUDA device ", d.device);
}

// Allgather and alltoall: every dimension but the first. An empty shape has
// no first dimension, so it differs from every other shape.
bool SameRows(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.empty() || b.empty()) return a.empty() && b.empty();
  return std::equal(a.begin() + 1, a.end(), b.begin() + 1, b.end());
}

std::optional<FieldDifference> SetChangeDifference(const TensorDesc& a, const TensorDesc& b) {
  if (a.aux == b.aux) return std::nullopt;
  if (a.kind == CollectiveKind::kAddProcessSet) {
    return FieldDifference{"ranks", List(a.aux), List(b.aux)};
  }
  return FieldDifference{"process set", absl::StrJoin(a.aux, ","), absl::StrJoin(b.aux, ",")};
}

std::optional<FieldDifference> ReductionDifference(const TensorDesc& a, const TensorDesc& b) {
  if (a.op != b.op) return FieldDifference{"op", ReduceOpName(a.op), ReduceOpName(b.op)};
  if (a.prescale != b.prescale) {
    return FieldDifference{"prescale", absl::StrCat(a.prescale), absl::StrCat(b.prescale)};
  }
  if (a.postscale != b.postscale) {
    return FieldDifference{"postscale", absl::StrCat(a.postscale), absl::StrCat(b.postscale)};
  }
  if (a.compression != b.compression) {
    return FieldDifference{"compression", absl::StrCat(static_cast<int>(a.compression)),
                           absl::StrCat(static_cast<int>(b.compression))};
  }
  return std::nullopt;
}

}  // namespace

std::optional<FieldDifference> Difference(const TensorDesc& a, const TensorDesc& b) {
  if (a.kind != b.kind) {
    return FieldDifference{"collective", CollectiveKindName(a.kind), CollectiveKindName(b.kind)};
  }
  // A set change carries nothing but its ranks or id.
  if (IsSetChange(a.kind)) return SetChangeDifference(a, b);
  if (a.dtype != b.dtype) return FieldDifference{"dtype", DTypeName(a.dtype), DTypeName(b.dtype)};
  if (a.on_device != b.on_device) return FieldDifference{"", Memory(a), Memory(b)};
  if (a.group_size != b.group_size) {
    return FieldDifference{"group size", absl::StrCat(a.group_size), absl::StrCat(b.group_size)};
  }
  const bool same_shape = HasPerRankRows(a.kind) ? SameRows(a.shape, b.shape) : a.shape == b.shape;
  if (!same_shape) return FieldDifference{"shape", List(a.shape), List(b.shape)};
  const CollectiveTraits& t = Traits(a.kind);
  if (t.rooted && a.root_rank != b.root_rank) {
    return FieldDifference{"root rank", absl::StrCat(a.root_rank), absl::StrCat(b.root_rank)};
  }
  if (t.reduces) return ReductionDifference(a, b);
  return std::nullopt;
}

absl::Status Disagreement(CollectiveKind kind, absl::string_view name, absl::string_view a_who,
                          absl::string_view b_who, const FieldDifference& d) {
  return absl::FailedPreconditionError(
      absl::StrCat(CollectiveKindName(kind), " \"", name, "\": ", b_who, " sent ", d.field,
                   d.field.empty() ? "" : " ", d.b, ", ", a_who, " sent ", d.a));
}

}  // namespace kolo::daemon::plan
