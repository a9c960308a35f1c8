#include "client/job_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/job_token_rule.h"
#include "common/publish_file.h"
#include "common/random_id.h"
#include "common/unique_fd.h"

namespace kolo {
namespace {

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return ErrnoToStatus(errno, absl::StrCat("open job token file ", path));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, absl::StrCat("stat ", path));
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("job token file ", path,
                     " must be a regular file of this user that only they can read (chmod 600)"));
  }
  char buf[257];
  ssize_t n = read(fd.get(), buf, sizeof(buf));
  if (n < 0) return ErrnoToStatus(errno, absl::StrCat("read ", path));
  std::string token(absl::StripAsciiWhitespace(absl::string_view(buf, static_cast<size_t>(n))));
  if (token.size() < kMinJobTokenChars || token.size() > 256) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job token file ", path, " holds no token of ", kMinJobTokenChars, " to 256 characters"));
  }
  return token;
}

}  // namespace

std::string DefaultJobTokenFile() {
  if (const char* v = std::getenv("KOLO_JOB_TOKEN_FILE"); v != nullptr && *v) return v;
  if (const char* home = std::getenv("HOME"); home != nullptr && *home) {
    return absl::StrCat(home, "/.kolo/job_token");
  }
  return "";
}

absl::StatusOr<std::string> LoadOrCreateJobToken(const std::string& path) {
  auto existing = ReadToken(path);
  if (existing.ok() || !absl::IsNotFound(existing.status())) return existing;
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = path.substr(0, slash);
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoToStatus(errno, absl::StrCat("create ", dir));
    }
  }
  // Published whole: if another rank got there first, its token is the one
  // to use.
  absl::StatusOr<bool> created = PublishFileOnce(path, RandomHex(16) + "\n");
  if (!created.ok()) {
    return absl::Status(created.status().code(),
                        absl::StrCat("job token file: ", created.status().message()));
  }
  return ReadToken(path);
}

}  // namespace kolo
