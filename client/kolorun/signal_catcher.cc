#include "client/kolorun/signal_catcher.h"

#include <errno.h>
#include <pthread.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <utility>

#include "common/errno_status.h"

namespace kolo::kolorun {

absl::StatusOr<std::unique_ptr<SignalCatcher>> SignalCatcher::Create() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigset_t old_mask;
  if (const int rc = ::pthread_sigmask(SIG_BLOCK, &set, &old_mask); rc != 0) {
    return ::kolo::ErrnoToStatus(rc, "pthread_sigmask");
  }
  UniqueFd fd(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    return ::kolo::ErrnoToStatus(err, "signalfd");
  }
  return std::unique_ptr<SignalCatcher>(new SignalCatcher(old_mask, std::move(fd)));
}

SignalCatcher::~SignalCatcher() {
  Read();
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

std::vector<int> SignalCatcher::Read() {
  std::vector<int> out;
  signalfd_siginfo info;
  while (::read(fd_.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    out.push_back(static_cast<int>(info.ssi_signo));
  }
  return out;
}

}  // namespace kolo::kolorun
