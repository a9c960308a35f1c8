#include "common/reduction_rule.h"

#include "absl/strings/str_cat.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo {

absl::Status CheckReductionArgs(CollectiveKind kind, absl::string_view name, DType dtype,
                                ReduceOp op, double prescale, double postscale,
                                Compression compression, bool device) {
  auto refuse = [&](auto&&... why) {
    return absl::InvalidArgumentError(
        absl::StrCat(CollectiveKindName(kind), " \"", name, "\": ", why...));
  };
  if (!ReducesWith(dtype, op)) {
    return refuse(DTypeName(dtype), " has no ", ReduceOpName(op), " (", ReduceOpsOf(dtype), ")");
  }
  if (!Scalable(dtype) && (prescale != 1.0 || postscale != 1.0)) {
    return refuse(DTypeName(dtype), " takes no scale factor (prescale ", prescale,
                  ", postscale ", postscale, ")");
  }
  if (kind == CollectiveKind::kReducescatter && op != ReduceOp::kSum &&
      op != ReduceOp::kAverage) {
    return refuse("op ", ReduceOpName(op), " (only sum and average)");
  }
  if (op == ReduceOp::kAdasum) {
    if (compression != Compression::kNone) {
      return refuse("adasum takes no compression (its coefficients need the exact values)");
    }
    if (device) {
      return refuse(
          "adasum runs on host tensors only in this build; copy the tensor to host memory, "
          "or use sum or average on the device");
    }
  }
  return absl::OkStatus();
}

}  // namespace kolo
