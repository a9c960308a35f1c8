#include "examples/fashion_mnist/gzip_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kolo::fashion_mnist {
namespace {

struct GzFileCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFilePtr = std::unique_ptr<gzFile_s, GzFileCloser>;

absl::Status ErrnoStatus(int err, const std::string& path) {
  std::string message = absl::StrCat(path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

// Converts the stream's zlib error state into a Status; OK when there is none.
absl::Status GzErrorStatus(gzFile file, const std::string& path) {
  int code = Z_OK;
  const char* message = gzerror(file, &code);
  switch (code) {
    case Z_OK:
    case Z_STREAM_END:
      return absl::OkStatus();
    case Z_ERRNO:
      return ErrnoStatus(errno, path);
    case Z_BUF_ERROR:  // zlib reports a stream cut short this way.
      return absl::DataLossError(absl::StrCat(path, ": gzip stream is truncated (", message, ")"));
    case Z_DATA_ERROR:
      return absl::DataLossError(absl::StrCat(path, ": gzip stream is corrupt (", message, ")"));
    case Z_MEM_ERROR:
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": out of memory while decompressing"));
    default:
      return absl::InternalError(absl::StrCat(path, ": zlib error ", code, " (", message, ")"));
  }
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> ReadGzipFile(const std::string& path) {
  errno = 0;
  GzFilePtr file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return ErrnoStatus(errno != 0 ? errno : ENOMEM, path);
  }
  gzbuffer(file.get(), 1 << 20);

  std::vector<uint8_t> bytes;
  constexpr size_t kChunk = 1 << 20;
  for (;;) {
    const size_t old_size = bytes.size();
    bytes.resize(old_size + kChunk);
    const int n = gzread(file.get(), bytes.data() + old_size, kChunk);
    if (n < 0) {
      absl::Status status = GzErrorStatus(file.get(), path);
      return status.ok() ? absl::DataLossError(absl::StrCat(path, ": gzread failed")) : status;
    }
    bytes.resize(old_size + static_cast<size_t>(n));
    if (n == 0) break;
  }
  // A stream cut short reads as a clean end of data; only the error state
  // tells it apart.
  absl::Status status = GzErrorStatus(file.get(), path);
  if (!status.ok()) return status;
  return bytes;
}

}  // namespace kolo::fashion_mnist
