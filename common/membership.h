// The error of a collective that ran into a membership change of its elastic
// job: a rank died, left, or ranks wait to join. It is ABORTED with a fixed
// prefix, so that it travels unchanged through every channel that carries a
// code and a message (completion slots, job events, gRPC) and the SDKs can
// tell it from other aborts (the Python SDK raises
// kolo.errors.MembershipChangedError for it). The one rule for both sides.
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kolo {

inline constexpr char kMembershipChangedPrefix[] = "MEMBERSHIP_CHANGED: ";

inline absl::Status MembershipChangedError(absl::string_view why) {
  return absl::AbortedError(absl::StrCat(kMembershipChangedPrefix, why));
}

inline bool IsMembershipChanged(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted &&
         absl::StartsWith(status.message(), kMembershipChangedPrefix);
}

}  // namespace kolo
