#include "daemon/plan/tensor_desc.h"

namespace kolo::daemon::plan {

TensorDesc DescOf(const Request& r) {
  TensorDesc d;
  d.kind = r.kind;
  d.dtype = r.dtype;
  d.op = r.op;
  d.shape = r.shape;
  d.prescale = r.prescale;
  d.postscale = r.postscale;
  d.root_rank = r.root_rank;
  d.compression = r.compression;
  d.on_device = r.device.has_value();
  d.device = r.device.has_value() ? r.device->input.device : -1;
  d.process_set = r.process_set;
  d.group_size = r.group_size;
  d.aux = r.aux;
  d.bytes = r.bytes;
  return d;
}

TensorDesc DescOf(const kolo::v1::TensorMeta& m) {
  TensorDesc d;
  d.kind = static_cast<CollectiveKind>(m.kind());
  d.dtype = static_cast<DType>(m.dtype());
  d.op = static_cast<ReduceOp>(m.op());
  d.shape.assign(m.shape().begin(), m.shape().end());
  d.prescale = m.prescale();
  d.postscale = m.postscale();
  d.root_rank = m.root_rank();
  d.compression = static_cast<Compression>(m.compression());
  d.on_device = m.device();
  d.process_set = m.process_set();
  d.group_size = m.group_size();
  d.aux.assign(m.aux().begin(), m.aux().end());
  d.bytes = m.bytes();
  return d;
}

}  // namespace kolo::daemon::plan
