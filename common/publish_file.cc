#include "common/publish_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/random_id.h"
#include "common/unique_fd.h"

namespace kolo {

absl::StatusOr<bool> PublishFileOnce(const std::string& path, absl::string_view contents) {
  const std::string draft = absl::StrCat(path, ".", getpid(), ".", RandomHex(4), ".new");
  {
    UniqueFd out(open(draft.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!out.valid()) return ErrnoToStatus(errno, absl::StrCat("create ", draft));
    if (write(out.get(), contents.data(), contents.size()) !=
            static_cast<ssize_t>(contents.size()) ||
        fsync(out.get()) != 0) {
      absl::Status s = ErrnoToStatus(errno, absl::StrCat("write ", draft));
      unlink(draft.c_str());
      return s;
    }
  }
  const int linked = link(draft.c_str(), path.c_str());
  const int link_errno = errno;
  unlink(draft.c_str());
  if (linked == 0) return true;
  if (link_errno == EEXIST) return false;
  return ErrnoToStatus(link_errno, absl::StrCat("create ", path));
}

}  // namespace kolo
