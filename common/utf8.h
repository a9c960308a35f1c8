// Whether bytes are well-formed UTF-8 (RFC 3629): no overlong forms, no
// surrogates, nothing past U+10FFFF. Tensor names must be: they travel in
// protobuf strings (between daemons, to koloctl) and in JSON timelines.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace kolo {

inline bool IsValidUtf8(absl::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t more;
    uint8_t lo = 0x80, hi = 0xbf;  // the range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      more = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      more = 2;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      more = 3;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // past U+10FFFF
    } else {
      return false;  // a continuation byte first, 0xc0, 0xc1 or 0xf5 and up
    }
    if (n - i <= more) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (size_t k = 2; k <= more; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return false;
    }
    i += more + 1;
  }
  return true;
}

}  // namespace kolo
