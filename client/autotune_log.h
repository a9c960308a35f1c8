// AutotuneLog: rank 0's record of its job's fusion tuner (HOROVOD_AUTOTUNE_LOG).
// kolod tunes and never writes a file; this client asks it for the samples
// taken since the last ask, every `period` and once more at Stop, and
// appends each as a CSV line:
//   sample,fusion_threshold_bytes,score_bytes_per_second,steps,seconds,warmup
// and, once the tuner has kept its best, "# kept fusion_threshold_bytes=N".
//
// Thread-safety: thread-safe; one thread of its own polls, Stop joins it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/kolo/v1/node.pb.h"

namespace kolo {

class AutotuneLog {
 public:
  using Fetch = std::function<absl::StatusOr<kolo::v1::JobAutotuneResponse>(uint32_t since)>;

  // Creates (truncates) `path` and starts polling; INVALID_ARGUMENT naming
  // the file when it cannot be written.
  static absl::StatusOr<std::unique_ptr<AutotuneLog>> Start(const std::string& path, Fetch fetch,
                                                            absl::Duration period);
  ~AutotuneLog() { Stop(); }
  AutotuneLog(const AutotuneLog&) = delete;
  AutotuneLog& operator=(const AutotuneLog&) = delete;

  // Takes the last samples and closes the file. Idempotent.
  void Stop();

 private:
  AutotuneLog(std::FILE* file, Fetch fetch, absl::Duration period)
      : file_(file), fetch_(std::move(fetch)), period_(period) {}
  void Loop();
  // One ask and its lines; false once there is nothing more to ask.
  bool Poll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_);
  const Fetch fetch_;
  const absl::Duration period_;
  uint32_t next_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // the tuner is done, or the session gone
  std::thread thread_;
};

}  // namespace kolo
