// The failure of a transfer whose link to another node broke: the node died,
// was stopped, or the network cut it off. The transport writes it in one form
// (its message names both nodes), so that a job can tell a lost node from
// other failures. An elastic job treats it as a membership change (as the
// Peer plane's report of the loss would be), which often arrives first. The
// one rule for both sides.
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kolo {

inline constexpr char kLinkLostText[] = ": connection to node ";
inline constexpr char kLinkLostEnd[] = " failed";

// "node SELF: connection to node PEER failed", the start of the message.
inline std::string LinkLostMessage(int self, int peer) {
  return absl::StrCat("node ", self, kLinkLostText, peer, kLinkLostEnd);
}

inline bool IsLinkLost(const absl::Status& status) {
  const absl::string_view m = status.message();
  const size_t at = m.find(kLinkLostText);
  return !status.ok() && at != absl::string_view::npos &&
         m.find(kLinkLostEnd, at + sizeof(kLinkLostText) - 1) != absl::string_view::npos;
}

}  // namespace kolo
