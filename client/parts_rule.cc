#include "client/parts_rule.h"

#include "proto/kolo/abi/collective_traits.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo {

bool GoesInParts(const PartsQuestion& q) {
  return Traits(q.kind).in_place &&
         !q.on_device && !q.grouped && q.one_node && q.daemon_takes && q.has_buffers &&
         q.bytes >= kPartsMinBytes && q.name_bytes + kPartSuffixBytes <= abi::v1::kMaxNameBytes;
}

}  // namespace kolo
