// The one rule for a job id, wherever one arrives (an attach, a Peer
// message): 1 to 128 bytes of letters, digits, '-', '_', '.' and ':'.
#pragma once

#include <string_view>

namespace kolo {

inline constexpr size_t kMaxJobIdBytes = 128;

inline bool ValidJobId(std::string_view id) {
  if (id.empty() || id.size() > kMaxJobIdBytes) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

}  // namespace kolo
