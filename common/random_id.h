// Unguessable identifiers (session ids, job tokens) from the kernel's CSPRNG.
#pragma once

#include <string>

namespace kolo {

// 2*bytes lowercase hex characters.
std::string RandomHex(int bytes);

}  // namespace kolo
