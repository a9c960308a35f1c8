#include "client/autotune_log.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/start_thread.h"

namespace kolo {

absl::StatusOr<std::unique_ptr<AutotuneLog>> AutotuneLog::Start(const std::string& path,
                                                                Fetch fetch,
                                                                absl::Duration period) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the autotune log ", path, " cannot be written: ", std::strerror(errno)));
  }
  std::fputs("sample,fusion_threshold_bytes,score_bytes_per_second,steps,seconds,warmup\n", f);
  std::fflush(f);
  std::unique_ptr<AutotuneLog> log(new AutotuneLog(f, std::move(fetch), period));
  absl::StatusOr<std::thread> t =
      StartThread("the autotune log", "kolo-tunelog", [p = log.get()] { p->Loop(); });
  if (!t.ok()) {
    std::fclose(f);
    log->file_ = nullptr;
    return t.status();
  }
  log->thread_ = std::move(*t);
  return log;
}

void AutotuneLog::Loop() {
  absl::MutexLock l(&mu_);
  while (!stop_ && !finished_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), period_);
    if (stop_) break;
    finished_ = !Poll();
  }
}

bool AutotuneLog::Poll() {
  if (file_ == nullptr) return false;
  absl::StatusOr<kolo::v1::JobAutotuneResponse> r = fetch_(next_);
  if (!r.ok()) {
    // Across nodes the tuner starts once every node has joined; any other
    // error means the session is gone.
    return r.status().code() == absl::StatusCode::kFailedPrecondition;
  }
  for (const kolo::v1::AutotuneSample& s : r->samples()) {
    std::fprintf(file_, "%u,%llu,%.1f,%u,%.6f,%d\n", s.index(),
                 static_cast<unsigned long long>(s.fusion_threshold_bytes()), s.score(), s.steps(),
                 s.seconds(), s.warmup() ? 1 : 0);
  }
  next_ = r->total();
  if (r->done()) {
    std::fprintf(file_, "# kept fusion_threshold_bytes=%llu\n",
                 static_cast<unsigned long long>(r->fusion_threshold_bytes()));
  }
  std::fflush(file_);
  return !r->done();
}

void AutotuneLog::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock l(&mu_);
  if (!finished_) Poll();
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

}  // namespace kolo
