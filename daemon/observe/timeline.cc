#include "daemon/observe/timeline.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "daemon/observe/display_name.h"

namespace kolo::daemon {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  return out;
}

void Timeline::Start(uint64_t max_events) {
  absl::MutexLock l(&mu_);
  max_events_ = max_events == 0 ? kDefaultMaxEvents : max_events;
  dropped_ = 0;
  started_ = absl::Now();
  events_.clear();
  job_pids_.clear();
  recording_.store(true, std::memory_order_relaxed);
}

std::string Timeline::Stop(uint64_t* events, uint64_t* dropped) {
  absl::MutexLock l(&mu_);
  return StopLocked(events, dropped);
}

absl::StatusOr<TimelineTrace> Timeline::StopRecording() {
  absl::MutexLock l(&mu_);
  if (!recording_.load(std::memory_order_relaxed)) {
    return absl::FailedPreconditionError("no timeline is being recorded (start one first)");
  }
  TimelineTrace trace;
  trace.json = StopLocked(&trace.events, &trace.dropped);
  return trace;
}

std::string Timeline::StopLocked(uint64_t* events, uint64_t* dropped) {
  recording_.store(false, std::memory_order_relaxed);
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  bool first = true;
  auto comma = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (const auto& [job, pid] : job_pids_) {
    comma();
    absl::StrAppend(&out, "{\"ph\":\"M\",\"pid\":", pid,
                    ",\"name\":\"process_name\",\"args\":{\"name\":", JsonString("job " + job),
                    "}}");
  }
  for (const Event& e : events_) {
    comma();
    absl::StrAppend(&out, "{\"ph\":\"", std::string(1, e.ph), "\",\"pid\":", e.pid,
                    ",\"tid\":", e.tid, ",\"ts\":", e.ts_us, ",\"cat\":", JsonString(e.phase),
                    ",\"name\":", JsonString(e.phase + " " + DisplayName(e.name)));
    if (e.ph == 'X') absl::StrAppend(&out, ",\"dur\":", e.dur_us);
    if (e.ph == 'i') absl::StrAppend(&out, ",\"s\":\"t\"");
    absl::StrAppend(&out, ",\"args\":{\"tensor\":", JsonString(DisplayName(e.name)),
                    e.args_json.empty() ? "" : ",", e.args_json, "}}");
  }
  out += "\n]}\n";
  if (events != nullptr) *events = events_.size();
  if (dropped != nullptr) *dropped = dropped_;
  events_.clear();
  events_.shrink_to_fit();
  return out;
}

void Timeline::Add(Event e, const std::string& job) {
  absl::MutexLock l(&mu_);
  if (!recording_.load(std::memory_order_relaxed)) return;
  e.ts_us -= absl::ToUnixMicros(started_);
  if (e.ts_us < 0) {
    // It began before this recording did (a tensor already queued when the
    // recording started): keep the part inside the recording, so no event has
    // a negative timestamp, and leave out what lies wholly before it.
    if (e.ph != 'X' || e.ts_us + e.dur_us < 0) return;
    e.dur_us += e.ts_us;
    e.ts_us = 0;
  }
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  auto [it, inserted] = job_pids_.try_emplace(job, job_pids_.size() + 1);
  e.pid = it->second;
  events_.push_back(std::move(e));
}

void Timeline::Span(const std::string& job, int rank, const std::string& name, const char* phase,
                    absl::Time begin, absl::Time end, const std::string& args_json) {
  if (!recording()) return;
  Add(Event{0, rank, 'X', name, phase, absl::ToUnixMicros(begin),
            absl::ToInt64Microseconds(end - begin), args_json},
      job);
}

void Timeline::Instant(const std::string& job, int rank, const std::string& name, const char* phase,
                       absl::Time at, const std::string& args_json) {
  if (!recording()) return;
  Add(Event{0, rank, 'i', name, phase, absl::ToUnixMicros(at), 0, args_json}, job);
}

}  // namespace kolo::daemon
