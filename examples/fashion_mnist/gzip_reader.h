// Reads a whole gzip-compressed file into memory. This file is the one place
// where zlib and errno results of the example become absl::Status values.
//
// Thread-safety: the function is reentrant; calls share no state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kolo::fashion_mnist {

// Returns the decompressed bytes of the gzip file at `path`. A file that is
// not gzip-compressed is returned as is. NOT_FOUND when the file does not
// exist; DATA_LOSS when the compressed stream is corrupt or ends early; other
// errors name the path and the system's reason.
absl::StatusOr<std::vector<uint8_t>> ReadGzipFile(const std::string& path);

}  // namespace kolo::fashion_mnist
