// The rule kolod applies to job tokens, shared with the client that makes
// them: at least 32 characters (128 random bits in hex).
#pragma once

#include <cstddef>

namespace kolo {

inline constexpr size_t kMinJobTokenChars = 32;

}  // namespace kolo
