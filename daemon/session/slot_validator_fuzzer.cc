// Fuzzes ValidateSlot with slots from the input: either raw bytes, or one of
// a few valid slots (a refusal among them) with bytes of the input written over it (so the checks
// past kind and dtype are reached). The arena is a heap block of exactly its
// size, partly filled from the input (auxiliary arrays are read from it). An
// accepted host request must have its input and output inside the arena:
// the target reads the input and writes the output whole, and ASan catches
// any byte outside.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "daemon/session/slot_validator.h"
#include "tools/fuzz/fuzz_input.h"

namespace kolo::daemon {
namespace {

using abi::v1::SubmitSlot;

constexpr uint64_t kArenaBytes = 4096;

// A refusal of allreduce "x" whose 8-byte reason is at arena offset 1024.
SubmitSlot RefusalTemplate() {
  SubmitSlot s;
  std::memset(&s, 0, sizeof(s));
  s.request_id = 1;
  s.kind = static_cast<uint32_t>(CollectiveKind::kAllreduce);
  s.name_length = 1;
  s.name[0] = 'x';
  s.flags = abi::v1::kSlotFlagRefusal;
  s.input_offset = 1024;
  s.byte_length = 8;
  return s;
}

SubmitSlot Template(uint8_t which) {
  if (which == 0x7f) return RefusalTemplate();
  if (which == 0x7e) {  // an allreduce by address (caller memory)
    SubmitSlot s = Template(0);
    s.flags = abi::v1::kSlotFlagCallerMemory;
    s.input_offset = 0x7f0000001000;
    s.output_offset = 0x7f0000001000;
    return s;
  }
  SubmitSlot s;
  std::memset(&s, 0, sizeof(s));
  s.request_id = 1;
  s.dtype = static_cast<uint32_t>(DType::kFloat32);
  s.prescale = 1.0;
  s.postscale = 1.0;
  s.ndim = 2;
  s.shape[0] = 4;
  s.shape[1] = 4;
  s.byte_length = 64;
  s.name_length = 1;
  s.name[0] = 'x';
  switch (which % 5) {
    case 0:
      s.kind = static_cast<uint32_t>(CollectiveKind::kAllreduce);
      s.output_offset = 1024;
      break;
    case 1:
      s.kind = static_cast<uint32_t>(CollectiveKind::kBroadcast);
      s.output_offset = 1024;
      break;
    case 2:
      s.kind = static_cast<uint32_t>(CollectiveKind::kAllgather);
      break;
    case 3:
      s.kind = static_cast<uint32_t>(CollectiveKind::kAlltoall);
      s.aux_offset = 2048;
      s.aux_count = 4;
      break;
    case 4:
      s.kind = static_cast<uint32_t>(CollectiveKind::kAddProcessSet);
      s.ndim = 0;
      s.byte_length = 0;
      s.aux_offset = 2048;
      s.aux_count = 2;
      break;
  }
  return s;
}

void Run(fuzz::FuzzInput& in) {
  const int job_size = 1 + in.Take<uint8_t>() % 64;
  auto arena = std::make_unique<uint8_t[]>(kArenaBytes);
  std::memset(arena.get(), 0, kArenaBytes);
  // Aux arrays of the templates start at 2048: small int64 entries there.
  for (int i = 0; i < 8; ++i) {
    int64_t v = in.Take<int8_t>();
    std::memcpy(arena.get() + 2048 + 8 * i, &v, sizeof(v));
  }
  SubmitSlot slot;
  const uint8_t mode = in.Take<uint8_t>();
  if (mode & 0x80) {
    in.TakeBytes(&slot, sizeof(slot));
  } else {
    slot = Template(mode);
    auto* bytes = reinterpret_cast<uint8_t*>(&slot);
    while (!in.empty()) {
      size_t at = in.Take<uint16_t>() % sizeof(slot);
      bytes[at] = in.Take<uint8_t>();
    }
  }
  // Half the inputs come from a session offered caller memory.
  const bool caller_memory = (mode & 0x40) != 0;
  absl::StatusOr<Request> r =
      ValidateSlot(slot, ArenaBounds{arena.get(), kArenaBytes, caller_memory}, job_size);
  if (!r.ok()) return;

  fuzz::Require(r->name.size() == slot.name_length && r->name.size() <= abi::v1::kMaxNameBytes);
  fuzz::Require(r->aux.size() == slot.aux_count);
  if (r->refusal.has_value()) {
    fuzz::Require(r->refusal->size() <= abi::v1::kMaxMessageBytes && r->input == nullptr &&
                  r->output == nullptr && !r->device.has_value());
    return;
  }
  if (r->device.has_value()) {
    fuzz::Require(r->input == nullptr && r->output == nullptr);
    return;
  }
  if ((slot.flags & abi::v1::kSlotFlagCallerMemory) != 0) {
    // Addresses in the rank's process: never resolved into the arena.
    fuzz::Require(caller_memory && r->input == nullptr && r->output == nullptr &&
                  r->caller_input != 0 && r->caller_input + r->bytes >= r->caller_input &&
                  r->caller_output + r->bytes >= r->caller_output);
    return;
  }
  uint64_t sum = 0;
  if (r->input != nullptr) {
    fuzz::Require(r->input >= arena.get() && r->input <= arena.get() + kArenaBytes);
    for (uint64_t i = 0; i < r->bytes; ++i) sum += r->input[i];
  }
  if (r->output != nullptr) {
    fuzz::Require(r->output >= arena.get() && r->output <= arena.get() + kArenaBytes);
    std::memset(r->output, static_cast<int>(sum), r->bytes);
  }
}

}  // namespace
}  // namespace kolo::daemon

KOLO_FUZZ_TARGET(kolo::daemon::Run)
