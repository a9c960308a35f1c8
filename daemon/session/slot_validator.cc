#include "daemon/session/slot_validator.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/reduction_rule.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon {
namespace {

// UTF-8 without control characters, except that a part's name (abi
// kSlotFlagPart) may end in kPartSeparator and its number: a tensor's name is
// never a part's.
bool ValidName(const char* name, uint32_t length, bool part) {
  if (length == 0) return false;
  uint32_t end = length;  // the characters that must not be control ones
  if (part) {
    uint32_t digits = 0;
    while (digits < length && absl::ascii_isdigit(name[length - 1 - digits])) ++digits;
    if (digits >= 1 && digits <= 20 && digits + 2 <= length &&
        name[length - digits - 1] == abi::v1::kPartSeparator) {
      end = length - digits - 1;
    }
  }
  for (uint32_t i = 0; i < end; ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f) return false;
  }
  return IsValidUtf8(absl::string_view(name, end));
}

bool RangeInArena(uint64_t offset, uint64_t length, uint64_t arena_bytes) {
  return offset <= arena_bytes && length <= arena_bytes - offset;
}

bool AllZero(const void* p, size_t n) {
  // Eight bytes at a time: every host request checks 304 bytes of device
  // fields here, on the small-message path.
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t any = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, b + i, 8);
    any |= word;
  }
  for (; i < n; ++i) any |= b[i];
  return any == 0;
}

cuda::DeviceTensorRef ToRef(const abi::v1::DeviceTensorSlot& t) {
  cuda::DeviceTensorRef ref;
  static_assert(sizeof(t.memory_handle) == cuda::kIpcHandleBytes);
  static_assert(sizeof(t.event_handle) == cuda::kIpcHandleBytes);
  std::memcpy(ref.memory.data(), t.memory_handle, cuda::kIpcHandleBytes);
  std::memcpy(ref.event.data(), t.event_handle, cuda::kIpcHandleBytes);
  ref.offset = t.offset;
  ref.bytes = t.bytes;
  ref.device = t.device;
  return ref;
}

// The device fields of `slot`: present only with kSlotFlagDevice, sizes equal
// to the request's, a sane ordinal, and no arena offsets.
absl::Status ValidateDevice(const abi::v1::SubmitSlot& slot, Request* r) {
  const std::string& name = r->name;
  constexpr uint32_t kHostOnly = abi::v1::kSlotFlagCallerMemory | abi::v1::kSlotFlagPart;
  if ((slot.flags & ~(abi::v1::kSlotFlagDevice | kHostOnly)) != 0 ||
      ((slot.flags & abi::v1::kSlotFlagDevice) != 0 && (slot.flags & kHostOnly) != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\": unknown slot flags ", slot.flags));
  }
  if ((slot.flags & abi::v1::kSlotFlagDevice) == 0) {
    if (!AllZero(&slot.device_input, sizeof(slot.device_input)) ||
        !AllZero(&slot.device_output, sizeof(slot.device_output))) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", name, "\": device tensor fields set without the device flag"));
    }
    return absl::OkStatus();
  }
  const bool same_size = Traits(r->kind).in_place;
  if (!Traits(r->kind).device) {
    return absl::UnimplementedError(absl::StrCat(CollectiveKindName(r->kind), " \"", name,
                                                 "\": device tensors are supported for ",
                                                 KindsWith(&CollectiveTraits::device), " so far"));
  }
  if (slot.input_offset != 0 || slot.output_offset != 0 || slot.aux_count != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", name, "\": a device request uses no arena offsets (input ", slot.input_offset,
        ", output ", slot.output_offset, ", aux entries ", slot.aux_count, ")"));
  }
  const struct {
    const char* what;
    const abi::v1::DeviceTensorSlot& t;
  } sides[] = {{"input", slot.device_input}, {"output", slot.device_output}};
  for (const auto& [what, t] : sides) {
    // An allgather's output holds every rank's rows, a reducescatter's its
    // own share: the device backend checks their sizes against the plan.
    if ((same_size || &t == &slot.device_input) && t.bytes != r->bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", name, "\": device ", what, " of ", t.bytes, " bytes, the request has ", r->bytes));
    }
    if (t.device < 0 || t.device >= kMaxDeviceOrdinal) {
      return absl::InvalidArgumentError(absl::StrCat("\"", name, "\": device ", what,
                                                     " on CUDA device ", t.device, ", outside [0, ",
                                                     kMaxDeviceOrdinal, ")"));
    }
    if (t.offset > std::numeric_limits<uint64_t>::max() - t.bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", name, "\": device ", what, " offset ", t.offset, " overflows"));
    }
    if (t.reserved != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", name, "\": device ", what, " has reserved bits set"));
    }
  }
  if ((r->kind == CollectiveKind::kAllgather && slot.device_output.bytes < r->bytes) ||
      (r->kind == CollectiveKind::kReducescatter && slot.device_output.bytes > r->bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        CollectiveKindName(r->kind), " \"", name, "\": device output of ", slot.device_output.bytes,
        " bytes cannot hold its result (input ", r->bytes, " bytes)"));
  }
  if (slot.device_input.device != slot.device_output.device) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name, "\": input on CUDA device ",
                                                   slot.device_input.device, ", output on device ",
                                                   slot.device_output.device));
  }
  r->device = cuda::DeviceIo{ToRef(slot.device_input), ToRef(slot.device_output)};
  return absl::OkStatus();
}

// Each step below checks one group of the slot's fields and fills the request's;
// every error names the tensor, the field and the value.

absl::Status CheckName(const abi::v1::SubmitSlot& slot, Request* r) {
  using abi::v1::kMaxNameBytes;
  if (slot.name_length > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot name length ", slot.name_length, " exceeds ", kMaxNameBytes));
  }
  if (!ValidName(slot.name, slot.name_length, (slot.flags & abi::v1::kSlotFlagPart) != 0)) {
    return absl::InvalidArgumentError(
        "slot name is empty, holds control characters or is not UTF-8");
  }
  r->request_id = slot.request_id;
  r->name.assign(slot.name, slot.name_length);
  return absl::OkStatus();
}

// The collective, the dtype, and the fields only some collectives use (op
// and scale factors, broadcast root).
absl::Status CheckCollective(const abi::v1::SubmitSlot& slot, int job_size, Request* r) {
  const std::string& name = r->name;
  if (!IsCollectiveKind(slot.kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\": unknown collective kind ", slot.kind));
  }
  r->kind = static_cast<CollectiveKind>(slot.kind);
  if (slot.dtype >= kNumDTypes) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name, "\": unknown dtype ", slot.dtype));
  }
  r->dtype = static_cast<DType>(slot.dtype);
  if (Traits(r->kind).reduces) {
    if (slot.reduce_op >= kNumReduceOps) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", name, "\": unknown reduce op ", slot.reduce_op));
    }
    r->op = static_cast<ReduceOp>(slot.reduce_op);
    if (!std::isfinite(slot.prescale) || !std::isfinite(slot.postscale)) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", name, "\": scale factors must be finite"));
    }
    r->prescale = slot.prescale;
    r->postscale = slot.postscale;
    // The rest of the reduction's rule needs the compression too: CheckOptions.
  } else if (Traits(r->kind).rooted) {
    if (slot.root_rank < 0 || slot.root_rank >= job_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "broadcast \"", name, "\": root rank ", slot.root_rank, " outside [0, ", job_size, ")"));
    }
    r->root_rank = slot.root_rank;
  }
  return absl::OkStatus();
}

// The shape, and the byte length it implies (no overflow on the way).
absl::Status CheckShape(const abi::v1::SubmitSlot& slot, Request* r) {
  using abi::v1::kMaxDims;
  const std::string& name = r->name;
  if (slot.ndim > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\": ", slot.ndim, " dimensions, at most ", kMaxDims));
  }
  uint64_t elements = 1;
  for (uint32_t d = 0; d < slot.ndim; ++d) {
    int64_t dim = slot.shape[d];
    if (dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat("\"", name, "\": negative dimension ", dim));
    }
    if (dim != 0 && elements > (uint64_t{1} << 62) / static_cast<uint64_t>(dim)) {
      return absl::InvalidArgumentError(absl::StrCat("\"", name, "\": shape overflows"));
    }
    elements *= static_cast<uint64_t>(dim);
    r->shape.push_back(dim);
  }
  // The element bound above does not cover the byte count: 2^61 float64
  // elements are 2^64 bytes, which would wrap to 0.
  if (elements > std::numeric_limits<uint64_t>::max() / DTypeSize(r->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name, "\": shape overflows"));
  }
  uint64_t expected = elements * DTypeSize(r->dtype);
  if ((slot.flags & abi::v1::kSlotFlagPart) != 0) {
    // A part: the shape is the whole tensor's, the bytes are this part's.
    if (!Traits(r->kind).in_place) {
      return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(r->kind), " \"", name,
                                                     "\": only ", KindsWith(&CollectiveTraits::in_place),
                                                     " go in parts"));
    }
    if (slot.byte_length == 0 || slot.byte_length > expected ||
        slot.byte_length % DTypeSize(r->dtype) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("\"", name, "\": a part of ", slot.byte_length,
                                                     " bytes of a ", DTypeName(r->dtype),
                                                     " tensor of ", expected, " bytes"));
    }
    expected = slot.byte_length;
  }
  if (slot.byte_length != expected) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name, "\": byte length ", slot.byte_length,
                                                   " but shape and ", DTypeName(r->dtype), " need ",
                                                   expected));
  }
  r->bytes = expected;
  if (Traits(r->kind).needs_first_dim && r->shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(r->kind), " \"", name,
                                                   "\": needs a tensor of at least one dimension"));
  }
  return absl::OkStatus();
}

// Host tensors in the submitting process (kSlotFlagCallerMemory): allowed
// for the session, allreduce or broadcast, ranges that do not wrap, input
// and output the same or apart. Whether they are mapped there is the
// kernel's to say when kolod reaches them (that request fails, no other).
absl::Status CheckCallerTensors(const abi::v1::SubmitSlot& slot, const ArenaBounds& arena,
                                Request* r) {
  const std::string& name = r->name;
  if (!arena.caller_memory) {
    return absl::PermissionDeniedError(
        absl::StrCat("\"", name,
                     "\": names its tensors by address, but kolod did not offer "
                     "this session caller memory"));
  }
  if (!Traits(r->kind).in_place) {
    return absl::InvalidArgumentError(absl::StrCat(
        CollectiveKindName(r->kind), " \"", name, "\": tensors by address are for ",
        KindsWith(&CollectiveTraits::in_place), " only"));
  }
  const uint64_t in = slot.input_offset, out = slot.output_offset, n = r->bytes;
  if (in == 0 || out == 0 || in + n < in || out + n < out) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name, "\": tensor at ", in,
                                                   " or output at ", out, " for ", n, " bytes"));
  }
  if (in != out && n > 0 && in < out + n && out < in + n) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\": input and output overlap without being the same"));
  }
  r->caller_input = in;
  r->caller_output = out;
  return absl::OkStatus();
}

// Host tensors: input and output inside the arena, either the same range or
// apart.
absl::Status CheckHostTensors(const abi::v1::SubmitSlot& slot, const ArenaBounds& arena,
                              Request* r) {
  const std::string& name = r->name;
  if ((slot.flags & abi::v1::kSlotFlagCallerMemory) != 0) {
    return CheckCallerTensors(slot, arena, r);
  }
  if (!RangeInArena(slot.input_offset, r->bytes, arena.bytes) ||
      !RangeInArena(slot.output_offset, r->bytes, arena.bytes)) {
    return absl::OutOfRangeError(absl::StrCat(
        "\"", name, "\": tensor [", slot.input_offset, ", +", r->bytes, ") or output [",
        slot.output_offset, ", +", r->bytes, ") outside the arena of ", arena.bytes, " bytes"));
  }
  if (slot.input_offset != slot.output_offset && r->bytes > 0 &&
      slot.input_offset < slot.output_offset + r->bytes &&
      slot.output_offset < slot.input_offset + r->bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\": input and output overlap without being the same"));
  }
  r->input = arena.base + slot.input_offset;
  r->output = arena.base + slot.output_offset;
  return absl::OkStatus();
}

// Compression, process set, group, and the auxiliary array (alltoall
// splits, a process set's ranks).
absl::Status CheckOptions(const abi::v1::SubmitSlot& slot, const ArenaBounds& arena, Request* r) {
  const std::string& name = r->name;
  const char* kind_name = CollectiveKindName(r->kind);
  if (slot.compression >= kNumCompressions) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\": unknown compression ", slot.compression));
  }
  r->compression = static_cast<Compression>(slot.compression);
  if (r->compression != Compression::kNone &&
      (!Traits(r->kind).compresses || r->dtype != DType::kFloat32)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kind_name, " \"", name, "\": compression applies to float32 allreduce only"));
  }
  if (Traits(r->kind).reduces) {
    KOLO_RETURN_IF_ERROR(CheckReductionArgs(r->kind, name, r->dtype, r->op, r->prescale,
                                            r->postscale, r->compression, r->device.has_value()));
  }
  r->process_set = static_cast<int>(slot.process_set);
  if (slot.group_size > 1) {
    if (!Traits(r->kind).groups) {
      return absl::InvalidArgumentError(absl::StrCat(
          kind_name, " \"", name, "\": only ", KindsWith(&CollectiveTraits::groups), " group"));
    }
    if (slot.group_size > 1000000) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", name, "\": group of ", slot.group_size, " tensors"));
    }
    r->group_id = slot.group_id;
    r->group_size = slot.group_size;
  }
  if (slot.aux_count == 0) return absl::OkStatus();
  if (!Traits(r->kind).takes_aux) {
    return absl::InvalidArgumentError(
        absl::StrCat(kind_name, " \"", name, "\": carries an auxiliary array it does not use"));
  }
  if (slot.aux_count > abi::v1::kMaxAuxEntries ||
      !RangeInArena(slot.aux_offset, slot.aux_count * 8, arena.bytes) || slot.aux_offset % 8 != 0) {
    return absl::OutOfRangeError(absl::StrCat(kind_name, " \"", name, "\": auxiliary array [",
                                              slot.aux_offset, ", +", slot.aux_count,
                                              " entries) outside the arena or misaligned"));
  }
  r->aux.resize(slot.aux_count);
  // An empty vector's data() may be null, which memcpy may not be handed.
  if (slot.aux_count > 0) {
    std::memcpy(r->aux.data(), arena.base + slot.aux_offset, slot.aux_count * 8);
  }
  return absl::OkStatus();
}

// A refusal: the collective it refuses (one that a rank can submit by name),
// its process set and group, and the reason's text; every other field zero.
absl::Status CheckRefusal(const abi::v1::SubmitSlot& slot, const ArenaBounds& arena, Request* r) {
  const std::string& name = r->name;
  if (slot.flags != abi::v1::kSlotFlagRefusal) {
    return absl::InvalidArgumentError(
        absl::StrCat("refusal of \"", name, "\": flags ", slot.flags, " besides the refusal"));
  }
  // A rank can refuse a collective it would submit by name: one that moves
  // a tensor.
  if (!Traits(static_cast<CollectiveKind>(slot.kind)).tensor) {
    return absl::InvalidArgumentError(absl::StrCat("refusal of \"", name, "\": collective kind ",
                                                   slot.kind, " cannot be refused"));
  }
  r->kind = static_cast<CollectiveKind>(slot.kind);
  abi::v1::SubmitSlot rest = slot;  // what must be zero
  rest.request_id = 0;
  rest.kind = 0;
  rest.name_length = 0;
  std::memset(rest.name, 0, sizeof(rest.name));
  rest.input_offset = 0;
  rest.byte_length = 0;
  rest.process_set = 0;
  rest.group_id = 0;
  rest.group_size = 0;
  rest.flags = 0;
  if (!AllZero(&rest, sizeof(rest))) {
    return absl::InvalidArgumentError(
        absl::StrCat("refusal of \"", name, "\": fields besides its name, set, group and reason"));
  }
  if (slot.byte_length > abi::v1::kMaxMessageBytes ||
      !RangeInArena(slot.input_offset, slot.byte_length, arena.bytes)) {
    return absl::OutOfRangeError(absl::StrCat(
        "refusal of \"", name, "\": reason [", slot.input_offset, ", +", slot.byte_length,
        ") longer than ", abi::v1::kMaxMessageBytes, " bytes or outside the arena"));
  }
  std::string reason(reinterpret_cast<const char*>(arena.base) + slot.input_offset,
                     slot.byte_length);
  for (char& c : reason) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = ' ';  // printed in other ranks' errors and logs
  }
  r->refusal = reason.empty() ? std::string("no reason given") : std::move(reason);
  r->process_set = static_cast<int>(slot.process_set);
  if (slot.group_size > 1) {
    if (!Traits(r->kind).groups || slot.group_size > 1000000) {
      return absl::InvalidArgumentError(absl::StrCat("refusal of \"", name, "\": group of ",
                                                     slot.group_size, " ",
                                                     CollectiveKindName(r->kind)));
    }
    r->group_id = slot.group_id;
    r->group_size = slot.group_size;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Request> ValidateSlot(const abi::v1::SubmitSlot& slot, const ArenaBounds& arena,
                                     int job_size) {
  Request r;
  KOLO_RETURN_IF_ERROR(CheckName(slot, &r));
  if ((slot.flags & abi::v1::kSlotFlagRefusal) != 0) {
    KOLO_RETURN_IF_ERROR(CheckRefusal(slot, arena, &r));
    return r;
  }
  KOLO_RETURN_IF_ERROR(CheckCollective(slot, job_size, &r));
  KOLO_RETURN_IF_ERROR(CheckShape(slot, &r));
  KOLO_RETURN_IF_ERROR(ValidateDevice(slot, &r));
  if (!r.device.has_value()) KOLO_RETURN_IF_ERROR(CheckHostTensors(slot, arena, &r));
  KOLO_RETURN_IF_ERROR(CheckOptions(slot, arena, &r));
  return r;
}

}  // namespace kolo::daemon
