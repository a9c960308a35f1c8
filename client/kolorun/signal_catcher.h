// SignalCatcher: turns SIGINT, SIGTERM and SIGHUP into readable events for
// kolorun's poll loop. It blocks them in the calling thread and reads them
// from a signalfd; on destruction it discards what is still pending and
// restores the previous mask.
//
// Thread-safety: owned by the thread that created it.
#pragma once

#include <signal.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/kolorun/subprocess.h"

namespace kolo::kolorun {

class SignalCatcher {
 public:
  static absl::StatusOr<std::unique_ptr<SignalCatcher>> Create();
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;
  ~SignalCatcher();

  // Polls readable while a signal is pending.
  int fd() const { return fd_.get(); }

  // The signals received since the last call, in arrival order.
  std::vector<int> Read();

 private:
  SignalCatcher(sigset_t old_mask, UniqueFd fd) : old_mask_(old_mask), fd_(std::move(fd)) {}

  sigset_t old_mask_;
  UniqueFd fd_;
};

}  // namespace kolo::kolorun
