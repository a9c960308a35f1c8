// Test helper: a fresh directory under /tmp, for tests whose Unix socket
// paths must stay under 108 bytes (TEST_TMPDIR is often longer). Every
// directory made is removed, with what it holds, when the test program
// exits normally.
//
// Thread-safety: MakeShortTempDir may be called from any thread.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace kolo {

// "/tmp/<prefix>-XXXXXX" made with mkdtemp; empty on failure.
std::string MakeShortTempDir(absl::string_view prefix);

}  // namespace kolo
