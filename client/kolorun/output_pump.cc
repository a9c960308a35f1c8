#include "client/kolorun/output_pump.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <utility>

namespace kolo::kolorun {

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
      ::poll(&p, 1, -1);
    } else {
      return;
    }
  }
}

void OutputPump::Add(int owner, UniqueFd fd, const std::string& prefix, int dest_fd,
                     UniqueFd copy_fd) {
  auto stream = std::make_unique<Stream>();
  stream->owner = owner;
  stream->fd = std::move(fd);
  stream->copy_fd = std::move(copy_fd);
  stream->prefixer = std::make_unique<LinePrefixer>(
      prefix, [dest_fd](std::string_view lines) { WriteAll(dest_fd, lines); });
  streams_.push_back(std::move(stream));
}

void OutputPump::DropClosed() {
  std::erase_if(streams_, [](const std::unique_ptr<Stream>& s) { return !s->fd.valid(); });
}

void OutputPump::Read(size_t i) {
  Stream& s = *streams_[i];
  std::array<char, 64 << 10> buf;
  for (int reads = 0; reads < 16 && s.fd.valid(); ++reads) {
    const ssize_t n = ::read(s.fd.get(), buf.data(), buf.size());
    if (n > 0) {
      if (s.copy_fd.valid()) {
        WriteAll(s.copy_fd.get(), std::string_view(buf.data(), static_cast<size_t>(n)));
      }
      s.prefixer->Append(std::string_view(buf.data(), static_cast<size_t>(n)));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      CloseStream(s);  // EOF or a read error.
    }
  }
}

void OutputPump::DrainNow(int owner) {
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i]->owner != owner) continue;
    while (streams_[i]->fd.valid()) {
      pollfd p{.fd = streams_[i]->fd.get(), .events = POLLIN, .revents = 0};
      if (::poll(&p, 1, 0) <= 0) break;
      Read(i);
    }
  }
}

bool OutputPump::AnyRankStreamOpen() const {
  return std::any_of(streams_.begin(), streams_.end(),
                     [](const auto& s) { return s->owner >= 0 && s->fd.valid(); });
}

void OutputPump::Close(std::optional<int> owner) {
  for (auto& s : streams_) {
    if (owner.has_value() ? s->owner == *owner : s->owner >= 0) CloseStream(*s);
  }
}

void OutputPump::CloseStream(Stream& s) {
  s.prefixer->Flush();
  s.fd.Reset();
  s.copy_fd.Reset();
}

}  // namespace kolo::kolorun
