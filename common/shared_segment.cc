#include "common/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace kolo {
namespace {

constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

absl::StatusOr<uint8_t*> Map(int fd, uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoToStatus(errno, "mmap session segment");
  return static_cast<uint8_t*>(p);
}

}  // namespace

absl::StatusOr<SharedSegment> SharedSegment::Create(uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("segment of 0 bytes");
  UniqueFd fd(memfd_create("kolo-session", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return ErrnoToStatus(errno, "memfd_create");
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("ftruncate segment to ", bytes));
  }
  if (fcntl(fd.get(), F_ADD_SEALS, kRequiredSeals) != 0) {
    return ErrnoToStatus(errno, "seal segment");
  }
  auto data = Map(fd.get(), bytes);
  if (!data.ok()) return data.status();
  return SharedSegment(std::move(fd), *data, bytes);
}

absl::StatusOr<SharedSegment::FdFacts> SharedSegment::Inspect(int fd) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError("the session segment is not an open descriptor");
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError("the session segment must be a memfd");
  }
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) return absl::InvalidArgumentError("the session segment must be a memfd");
  if ((seals & kRequiredSeals) != kRequiredSeals) {
    return absl::InvalidArgumentError(
        "the session segment must be sealed against shrinking, growing and sealing");
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) != O_RDWR) {
    return absl::InvalidArgumentError("the session segment must be open for reading and writing");
  }
  return FdFacts{static_cast<uint64_t>(st.st_size), st.st_uid};
}

absl::StatusOr<SharedSegment> SharedSegment::Adopt(UniqueFd fd, uint64_t expected_bytes) {
  auto facts = Inspect(fd.get());
  if (!facts.ok()) return facts.status();
  if (facts->bytes != expected_bytes || expected_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment is ", facts->bytes, " bytes, the request says ", expected_bytes));
  }
  auto data = Map(fd.get(), expected_bytes);
  if (!data.ok()) return data.status();
  return SharedSegment(std::move(fd), *data, expected_bytes);
}

SharedSegment::SharedSegment(SharedSegment&& o) noexcept
    : fd_(std::move(o.fd_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& o) noexcept {
  if (this != &o) {
    Unmap();
    fd_ = std::move(o.fd_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

SharedSegment::~SharedSegment() { Unmap(); }

void SharedSegment::Unmap() {
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace kolo
