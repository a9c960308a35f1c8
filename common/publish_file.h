// Publishing a small file whole: written under a private name beside `path`
// (mode 0600), synced, then linked to `path`. A reader never sees it half
// written, and of several processes publishing at once exactly one wins.
//
// Thread-safety: a free function.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kolo {

// True when this call created `path` with `contents`; false when `path`
// already existed (its contents are the other writer's, left as they are).
absl::StatusOr<bool> PublishFileOnce(const std::string& path, absl::string_view contents);

}  // namespace kolo
