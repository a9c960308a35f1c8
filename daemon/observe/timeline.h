// Timeline: a recording of every collective's phases per rank, started and
// stopped at run time, rendered as Chrome trace-event JSON that Perfetto's UI
// and chrome://tracing load. Each job is a process row and each rank a thread
// row; a tensor's phases on a rank are:
//   QUEUED     from the rank's submission until every rank had submitted
//   NEGOTIATED the instant the name became ready everywhere
//   FUSED      the instant it was planned into a response (args: tensors)
//   REDUCED    the response's execution span (args: bytes, backend)
//   DONE       the instant its completion was handed to the rank
// The recording is bounded: past max_events, new events are counted as
// dropped, so a forgotten recording cannot grow without end.
//
// kolod keeps one for the node (every job's events, for its operator) and
// one per job (that job's ranks on this node, for its own ranks); the
// executor records each event into those that are recording.
//
// Thread-safety: thread-safe. Recording checks an atomic flag first, so a
// stopped timeline costs the hot path one relaxed load.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kolo::daemon {

// A stopped recording: Chrome trace JSON and its counts.
struct TimelineTrace {
  std::string json;
  uint64_t events = 0;
  uint64_t dropped = 0;
};

class Timeline {
 public:
  static constexpr uint64_t kDefaultMaxEvents = 1 << 20;

  bool recording() const { return recording_.load(std::memory_order_relaxed); }

  // Starts a fresh recording (discarding any previous one).
  void Start(uint64_t max_events);
  // Stops and returns the trace JSON; `events`/`dropped` receive the counts.
  std::string Stop(uint64_t* events, uint64_t* dropped);
  // Stops the recording and returns it; FAILED_PRECONDITION when none is
  // being recorded. The check and the stop are one step, so of two callers
  // racing to stop one recording exactly one gets the trace.
  absl::StatusOr<TimelineTrace> StopRecording();

  // A span [begin, end) of `phase` for `name` on rank `rank` of `job`.
  void Span(const std::string& job, int rank, const std::string& name, const char* phase,
            absl::Time begin, absl::Time end, const std::string& args_json = "");
  // An instant of `phase`.
  void Instant(const std::string& job, int rank, const std::string& name, const char* phase,
               absl::Time at, const std::string& args_json = "");

 private:
  struct Event {
    int pid;
    int tid;
    char ph;  // 'X' span or 'i' instant
    std::string name;
    std::string phase;
    int64_t ts_us;
    int64_t dur_us;
    std::string args_json;
  };
  void Add(Event e, const std::string& job) ABSL_LOCKS_EXCLUDED(mu_);
  std::string StopLocked(uint64_t* events, uint64_t* dropped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::atomic<bool> recording_{false};
  absl::Mutex mu_;
  uint64_t max_events_ ABSL_GUARDED_BY(mu_) = kDefaultMaxEvents;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time started_ ABSL_GUARDED_BY(mu_);
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> job_pids_ ABSL_GUARDED_BY(mu_);
};

// `s` as a JSON string literal (quotes included).
std::string JsonString(const std::string& s);

}  // namespace kolo::daemon
