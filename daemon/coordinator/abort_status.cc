#include "daemon/coordinator/abort_status.h"

#include <string>

#include "absl/strings/cord.h"

namespace kolo::daemon {
namespace {

constexpr char kPlannedMayFinishUrl[] = "kolo.dev/planned-may-finish";

}  // namespace

absl::Status PlannedMayFinish(absl::Status why) {
  if (!why.ok()) why.SetPayload(kPlannedMayFinishUrl, absl::Cord("1"));
  return why;
}

bool IsPlannedMayFinish(const absl::Status& why) {
  return why.GetPayload(kPlannedMayFinishUrl).has_value();
}

void ToPeerAbort(const absl::Status& why, kolo::v1::PeerAbort* out) {
  out->set_reason(std::string(why.message()));
  out->set_code(static_cast<uint32_t>(why.code()));
  out->set_planned_may_finish(IsPlannedMayFinish(why));
}

absl::Status FromPeerAbort(const kolo::v1::PeerAbort& abort) {
  const uint32_t code = abort.code();
  const bool known = code >= static_cast<uint32_t>(absl::StatusCode::kCancelled) &&
                     code <= static_cast<uint32_t>(absl::StatusCode::kUnauthenticated);
  absl::Status why(known ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kAborted,
                   abort.reason());
  return abort.planned_may_finish() ? PlannedMayFinish(std::move(why)) : why;
}

}  // namespace kolo::daemon
