// Comparison of secrets (job and admin tokens) in time that does not depend
// on where they differ, so a token cannot be guessed byte by byte.
#pragma once

#include <string_view>

namespace kolo {

inline bool SecretsEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace kolo
