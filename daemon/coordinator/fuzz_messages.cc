#include "daemon/coordinator/fuzz_messages.h"

#include <cstdint>
#include <string>

#include "proto/kolo/abi/types.h"

namespace kolo::daemon {
namespace {}  // namespace

kolo::v1::TensorMeta TensorMetaFrom(fuzz::FuzzInput& in, int job_size) {
  kolo::v1::TensorMeta m;
  const uint8_t raw = in.Take<uint8_t>();  // bit i: field group i takes raw values
  const uint8_t name = in.Take<uint8_t>();
  m.set_name(name < 250 ? std::string(1, static_cast<char>('a' + name % 3)) : in.TakeString(32));
  m.set_kind((raw & 1) ? in.Take<uint32_t>() : 1 + in.Take<uint8_t>() % 9);
  // Every dtype and two values past them.
  m.set_dtype((raw & 1) ? in.Take<uint32_t>() : in.Take<uint8_t>() % (kNumDTypes + 2));
  m.set_op((raw & 1) ? in.Take<uint32_t>() : in.Take<uint8_t>() % 6);
  const int ndim = in.Take<uint8_t>() % 4;
  uint64_t elements = 1;
  for (int d = 0; d < ndim; ++d) {
    int64_t dim = in.TakeSmall(raw & 2);
    m.add_shape(dim);
    elements *= static_cast<uint64_t>(dim);
  }
  m.set_bytes((raw & 2) ? in.Take<uint64_t>() : elements * 4);
  m.set_prescale((raw & 4) ? in.Take<double>() : 1.0);
  m.set_postscale((raw & 4) ? in.Take<double>() : 1.0);
  m.set_root_rank(static_cast<int32_t>(in.TakeSmall(raw & 8)));
  const int rows = in.Take<uint8_t>() % (job_size + 2);
  for (int i = 0; i < rows; ++i) m.add_rows(in.TakeSmall(raw & 16));
  const int splits = in.Take<uint8_t>() % (job_size * job_size + 2);
  for (int i = 0; i < splits; ++i) m.add_splits(in.TakeSmall(raw & 16));
  const uint8_t misc = in.Take<uint8_t>();
  m.set_process_set((raw & 32) ? in.Take<int32_t>() : misc % 3);
  const int aux = (misc >> 2) % 5;
  for (int i = 0; i < aux; ++i) m.add_aux(in.TakeSmall(raw & 32));
  m.set_joined((raw & 64) ? in.Take<int32_t>() : (misc >> 5) % 3);
  m.set_group_size((raw & 64) ? in.Take<uint32_t>() : 0);
  m.set_compression((raw & 64) ? in.Take<uint32_t>() : 0);
  m.set_device((raw & 128) != 0);
  if ((misc & 0x80) && (raw & 128)) m.set_local_error("ranks disagreed");
  return m;
}

}  // namespace kolo::daemon
