// StartThread: std::thread without the exception. The system may refuse a
// thread (a task limit, no memory); std::thread then throws, which in kolod
// would end the daemon for every job. This turns the refusal into a
// RESOURCE_EXHAUSTED status that fails only the work that asked for it.
//
// Thread-safety: a free function, safe from any thread.
#pragma once

#include <functional>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kolo {

// Runs `body` on a new thread; `what` names it in the error ("the session
// of rank 3").
inline absl::StatusOr<std::thread> StartThread(absl::string_view what, std::function<void()> body) {
  try {
    return std::thread(std::move(body));
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start a thread for ", what, ": ", e.what()));
  }
}

}  // namespace kolo
