#include "daemon/exec/session_results.h"

#include "absl/strings/str_cat.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon {

absl::StatusOr<uint8_t*> SessionResults::Allocate(FusedMember& m, uint64_t bytes, int64_t value) {
  const size_t i = m.results.size();
  if (i >= m.set.requests.size()) {
    return absl::InternalError(absl::StrCat("\"", m.set.name, "\": more results than requests"));
  }
  const Request& r = m.set.requests[i];
  absl::StatusOr<uint64_t> offset = r.origin->AllocateResult(bytes);
  if (!offset.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(CollectiveKindName(r.kind), " \"", m.set.name,
                                                     "\": ", offset.status().message()));
  }
  uint8_t* data = r.origin->arena_base() + *offset;
  m.results.push_back(ResultPlacement{*offset, bytes, value, data});
  return data;
}

}  // namespace kolo::daemon
