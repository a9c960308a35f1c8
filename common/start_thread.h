// StartThread: std::thread without the exception. The system may refuse a
// thread (a task limit, no memory); std::thread then throws, which in kolod
// would end the daemon for every job. This turns the refusal into a
// RESOURCE_EXHAUSTED status that fails only the work that asked for it.
// The thread carries a short name, so that `top -H`, a debugger or a
// scheduler trace tells kolod's threads apart.
//
// Thread-safety: a free function, safe from any thread.
#pragma once

#include <pthread.h>

#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kolo {

// The longest thread name the system keeps (without its terminating NUL).
inline constexpr size_t kMaxThreadName = 15;

// Names the calling thread `name` (cut to kMaxThreadName characters).
inline void NameThisThread(absl::string_view name) {
  const std::string cut(name.substr(0, kMaxThreadName));
  pthread_setname_np(pthread_self(), cut.c_str());  // a name is only a help
}

// Runs `body` on a new thread named `name` (cut to kMaxThreadName
// characters); `what` names it in the error ("the session of rank 3").
inline absl::StatusOr<std::thread> StartThread(absl::string_view what, absl::string_view name,
                                               std::function<void()> body) {
  try {
    // Named both by the new thread itself (so its body sees its name) and
    // from here (so the name is there once StartThread returns).
    const std::string cut(name.substr(0, kMaxThreadName));
    std::thread t([cut, body = std::move(body)] {
      NameThisThread(cut);
      body();
    });
    pthread_setname_np(t.native_handle(), cut.c_str());  // a name is only a help
    return t;
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start a thread for ", what, ": ", e.what()));
  }
}

}  // namespace kolo
