#include "client/submit_spec.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/naming.h"
#include "common/reduction_rule.h"
#include "proto/kolo/abi/collective_traits.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo {
namespace {

// The checks for tensors in GPU memory.
absl::Status CheckDevice(const SubmitSpec& spec, const std::string& name) {
  const ConstTensorView& input = spec.input;
  if (!Traits(spec.kind).device) {
    return absl::UnimplementedError(absl::StrCat(CollectiveKindName(spec.kind), " \"", name,
                                                 "\": device tensors are supported for ",
                                                 KindsWith(&CollectiveTraits::device), " so far"));
  }
  if (DeviceOutputKind(spec.kind)) {
    const TensorView& out = spec.output;
    if (out.data == nullptr || out.dtype != input.dtype || out.shape.empty() ||
        !std::equal(out.shape.begin() + 1, out.shape.end(), input.shape.begin() + 1,
                    input.shape.end())) {
      return absl::InvalidArgumentError(absl::StrCat(
          CollectiveKindName(spec.kind), " \"", name,
          "\": a device tensor's output must be given, of the input's dtype and of its shape "
          "but for the first dimension"));
    }
  }
  if (input.device != spec.output.device) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name, "\": input on device ", input.device,
                                                   ", output on device ", spec.output.device,
                                                   " (both must be on one GPU)"));
  }
  return absl::OkStatus();
}

}  // namespace

bool DeviceOutputKind(CollectiveKind kind) {
  return Traits(kind).device && Traits(kind).returns_result;
}

bool OnDevice(const SubmitSpec& spec) {
  return spec.input.device >= 0 || (Traits(spec.kind).device && spec.output.device >= 0);
}

absl::Status CheckRootRank(const SubmitSpec& spec, int size) {
  if (spec.kind != CollectiveKind::kBroadcast || (spec.root_rank >= 0 && spec.root_rank < size)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("broadcast \"", std::string(spec.name),
                                                 "\": root rank ", spec.root_rank,
                                                 " outside [0, ", size, ")"));
}

absl::Status CheckSpec(const SubmitSpec& spec) {
  const std::string name(spec.name);
  const ConstTensorView& input = spec.input;
  if (absl::Status s = Naming::CheckName(name); !s.ok()) return s;
  if (input.shape.size() > abi::v1::kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\": at most ", abi::v1::kMaxDims, " dimensions"));
  }
  if (Traits(spec.kind).in_place &&
      (input.dtype != spec.output.dtype || input.shape != spec.output.shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\": input and output differ in dtype or shape"));
  }
  if (Traits(spec.kind).needs_first_dim && input.shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(spec.kind), " \"", name,
                                                   "\": needs a tensor of at least one dimension"));
  }
  if (static_cast<uint32_t>(input.dtype) >= kNumDTypes) {
    return absl::InvalidArgumentError("unknown dtype");
  }
  if (Traits(spec.kind).reduces) {
    const AllreduceOptions& o = spec.reduce;
    if (absl::Status s = CheckReductionArgs(spec.kind, name, input.dtype, o.op, o.prescale,
                                            o.postscale, o.compression, OnDevice(spec));
        !s.ok()) {
      return s;
    }
  }
  for (int64_t d : input.shape) {
    if (d < 0) return absl::InvalidArgumentError("negative dimension");
  }
  if (OnDevice(spec)) return CheckDevice(spec, name);
  if (DeviceOutputKind(spec.kind) && spec.output.data != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        CollectiveKindName(spec.kind), " \"", name,
        "\": the form with an output takes device tensors; host tensors use the form that "
        "returns a HostBuffer"));
  }
  return absl::OkStatus();
}

}  // namespace kolo
