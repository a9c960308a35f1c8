#include "daemon/observe/timeline.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo::daemon {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

// Parses a trace and returns its traceEvents, failing the test if the JSON
// does not parse or has no traceEvents list.
std::vector<Struct> ParseEvents(const std::string& json) {
  Struct trace;
  auto status = google::protobuf::util::JsonStringToMessage(json, &trace);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  std::vector<Struct> out;
  auto it = trace.fields().find("traceEvents");
  if (it == trace.fields().end() || !it->second.has_list_value()) {
    ADD_FAILURE() << "no traceEvents list in " << json;
    return out;
  }
  for (const Value& v : it->second.list_value().values()) {
    EXPECT_TRUE(v.has_struct_value());
    out.push_back(v.struct_value());
  }
  return out;
}

std::string Str(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? "<absent>" : it->second.string_value();
}

double Num(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  if (it == s.fields().end() || !it->second.has_number_value()) {
    ADD_FAILURE() << "no number " << key;
    return -1;
  }
  return it->second.number_value();
}

bool Has(const Struct& s, const std::string& key) { return s.fields().count(key) > 0; }

TEST(TimelineTest, NothingIsRecordedWhileStopped) {
  Timeline timeline;
  EXPECT_FALSE(timeline.recording());
  const absl::Time now = absl::Now();
  timeline.Span("j", 0, "t", "QUEUED", now, now + absl::Milliseconds(1));
  timeline.Instant("j", 0, "t", "DONE", now);

  timeline.Start(100);
  EXPECT_TRUE(timeline.recording());
  uint64_t events = 99, dropped = 99;
  timeline.Stop(&events, &dropped);
  EXPECT_FALSE(timeline.recording());
  EXPECT_EQ(events, 0u);
  EXPECT_EQ(dropped, 0u);

  // After Stop, recording is off again; a new recording starts empty.
  timeline.Instant("j", 0, "t", "DONE", absl::Now());
  timeline.Start(100);
  std::string json = timeline.Stop(&events, &dropped);
  EXPECT_EQ(events, 0u);
  EXPECT_TRUE(ParseEvents(json).empty()) << json;
}

TEST(TimelineTest, StopRecordingNeedsARecordingAndStopsItOnce) {
  Timeline timeline;
  EXPECT_EQ(timeline.StopRecording().status().code(), absl::StatusCode::kFailedPrecondition);

  timeline.Start(100);
  timeline.Instant("j", 3, "t", "DONE", absl::Now());
  absl::StatusOr<TimelineTrace> trace = timeline.StopRecording();
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_FALSE(timeline.recording());
  EXPECT_EQ(trace->events, 1u);
  EXPECT_EQ(trace->dropped, 0u);
  std::vector<Struct> events = ParseEvents(trace->json);
  ASSERT_EQ(events.size(), 2u) << trace->json;  // the process name, the instant
  EXPECT_EQ(Str(events[1], "name"), "DONE t");
  EXPECT_EQ(Num(events[1], "tid"), 3);

  // Stopped once: a second stop has nothing to return.
  EXPECT_EQ(timeline.StopRecording().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TimelineTest, StopYieldsParseableTraceWithProcessNamesSpansAndInstants) {
  Timeline timeline;
  timeline.Start(100);
  const absl::Time base = absl::Now();
  timeline.Span("job-a", 0, "grad/w1", "QUEUED", base + absl::Milliseconds(10),
                base + absl::Milliseconds(25));
  timeline.Instant("job-a", 1, "grad/w1", "NEGOTIATED", base + absl::Milliseconds(25));
  timeline.Span("job-b", 3, "grad/w2", "REDUCED", base + absl::Milliseconds(30),
                base + absl::Milliseconds(31), "\"bytes\":4096");
  uint64_t events = 0, dropped = 99;
  const std::string json = timeline.Stop(&events, &dropped);
  EXPECT_EQ(events, 3u);
  EXPECT_EQ(dropped, 0u);

  std::map<std::string, double> pid_of_job;  // from process_name metadata
  std::vector<Struct> spans, instants;
  for (const Struct& e : ParseEvents(json)) {
    const std::string ph = Str(e, "ph");
    if (ph == "M") {
      EXPECT_EQ(Str(e, "name"), "process_name");
      const Struct& args = e.fields().at("args").struct_value();
      pid_of_job[Str(args, "name")] = Num(e, "pid");
    } else if (ph == "X") {
      spans.push_back(e);
    } else if (ph == "i") {
      instants.push_back(e);
    } else {
      ADD_FAILURE() << "unexpected ph " << ph;
    }
  }
  ASSERT_EQ(pid_of_job.size(), 2u) << json;
  ASSERT_TRUE(pid_of_job.count("job job-a")) << json;
  ASSERT_TRUE(pid_of_job.count("job job-b")) << json;
  EXPECT_NE(pid_of_job["job job-a"], pid_of_job["job job-b"]);

  ASSERT_EQ(spans.size(), 2u);
  ASSERT_EQ(instants.size(), 1u);
  for (const Struct& e : spans) {
    EXPECT_TRUE(Has(e, "dur")) << "span without dur";
    EXPECT_GE(Num(e, "ts"), 0) << "ts is relative to Start";
  }
  const Struct& queued = spans[0];
  EXPECT_EQ(Str(queued, "name"), "QUEUED grad/w1");
  EXPECT_EQ(Str(queued, "cat"), "QUEUED");
  EXPECT_EQ(Num(queued, "pid"), pid_of_job["job job-a"]);
  EXPECT_EQ(Num(queued, "tid"), 0);
  EXPECT_EQ(Num(queued, "dur"), 15000);
  // Start ran before `base`, so the span begins at least 10 ms in.
  EXPECT_GE(Num(queued, "ts"), 10000);
  EXPECT_EQ(Str(queued.fields().at("args").struct_value(), "tensor"), "grad/w1");

  const Struct& reduced = spans[1];
  EXPECT_EQ(Num(reduced, "pid"), pid_of_job["job job-b"]);
  EXPECT_EQ(Num(reduced, "tid"), 3);
  EXPECT_EQ(Num(reduced, "dur"), 1000);
  EXPECT_EQ(Num(reduced.fields().at("args").struct_value(), "bytes"), 4096);
  EXPECT_GE(Num(reduced, "ts"), Num(queued, "ts") + 20000);

  const Struct& negotiated = instants[0];
  EXPECT_EQ(Str(negotiated, "name"), "NEGOTIATED grad/w1");
  EXPECT_EQ(Num(negotiated, "tid"), 1);
  EXPECT_FALSE(Has(negotiated, "dur"));
  EXPECT_EQ(Str(negotiated, "s"), "t");
  EXPECT_EQ(Num(negotiated, "ts"), Num(queued, "ts") + 15000);
}

TEST(TimelineTest, EventsFromBeforeStartAreClippedToTheRecording) {
  // A tensor queued before the recording started (an operator starting a
  // trace in the middle of a hang) must not produce negative timestamps.
  const absl::Time before = absl::Now() - absl::Seconds(10);
  Timeline timeline;
  timeline.Start(100);
  const absl::Time after = absl::Now() + absl::Milliseconds(5);
  timeline.Span("j", 0, "straddles", "QUEUED", before, after);
  timeline.Span("j", 0, "ended-before", "QUEUED", before, before + absl::Seconds(1));
  timeline.Instant("j", 0, "ended-before", "NEGOTIATED", before + absl::Seconds(1));
  uint64_t events = 0, dropped = 0;
  const std::string json = timeline.Stop(&events, &dropped);
  EXPECT_EQ(events, 1u) << json;
  EXPECT_EQ(dropped, 0u);
  int spans = 0;
  for (const Struct& e : ParseEvents(json)) {
    if (Str(e, "ph") != "X") continue;
    ++spans;
    EXPECT_EQ(Str(e, "name"), "QUEUED straddles");
    EXPECT_EQ(Num(e, "ts"), 0);
    // It still ends where it did (to within the microsecond rounding).
    EXPECT_GE(Num(e, "dur"), 5000 - 1);
    EXPECT_LT(Num(e, "dur"), 10e6);
  }
  EXPECT_EQ(spans, 1);
}

TEST(TimelineTest, MaxEventsBoundsTheRecordingAndCountsTheDropped) {
  Timeline timeline;
  timeline.Start(3);
  const absl::Time now = absl::Now();
  for (int i = 0; i < 8; ++i) timeline.Instant("j", 0, "t", "DONE", now);
  uint64_t events = 0, dropped = 0;
  const std::string json = timeline.Stop(&events, &dropped);
  EXPECT_EQ(events, 3u);
  EXPECT_EQ(dropped, 5u);
  int instants = 0;
  for (const Struct& e : ParseEvents(json)) instants += Str(e, "ph") == "i";
  EXPECT_EQ(instants, 3);

  // A fresh recording resets both counts.
  timeline.Start(3);
  timeline.Instant("j", 0, "t", "DONE", absl::Now());
  timeline.Stop(&events, &dropped);
  EXPECT_EQ(events, 1u);
  EXPECT_EQ(dropped, 0u);
}

TEST(TimelineTest, JsonStringEscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonString("plain/name"), "\"plain/name\"");
  EXPECT_EQ(JsonString("a\"b"), R"("a\"b")");
  EXPECT_EQ(JsonString("a\\b"), R"("a\\b")");
  EXPECT_EQ(JsonString("a\nb\tc"), R"("a\nb\tc")");
  EXPECT_EQ(JsonString(std::string("\x01\x1f\r", 3)), R"("\u0001\u001f\u000d")");
  EXPECT_EQ(JsonString(std::string("a\0b", 3)), R"("a\u0000b")");
}

TEST(TimelineTest, HostileNamesStillYieldParseableJsonThatRoundTrips) {
  const std::string name = "we\"ird\\na\nme\x01\t}";
  const std::string job = "job\"\\\n";
  Timeline timeline;
  timeline.Start(10);
  const absl::Time now = absl::Now();
  timeline.Span(job, 0, name, "QUEUED", now, now + absl::Microseconds(5));
  const std::string json = timeline.Stop(nullptr, nullptr);
  bool saw_span = false, saw_process = false;
  for (const Struct& e : ParseEvents(json)) {
    if (Str(e, "ph") == "X") {
      saw_span = true;
      EXPECT_EQ(Str(e.fields().at("args").struct_value(), "tensor"), name);
      EXPECT_EQ(Str(e, "name"), "QUEUED " + name);
    } else if (Str(e, "ph") == "M") {
      saw_process = true;
      EXPECT_EQ(Str(e.fields().at("args").struct_value(), "name"), "job " + job);
    }
  }
  EXPECT_TRUE(saw_span);
  EXPECT_TRUE(saw_process);
}

// A later part of a tensor sent in parts shows as "<name>#<i>".
TEST(TimelineTest, PartsShowTheirNumberAfterAHash) {
  Timeline timeline;
  timeline.Start(10);
  const absl::Time now = absl::Now();
  timeline.Span("j", 0, std::string("grad/w") + abi::v1::kPartSeparator + "3", "REDUCED", now,
                now + absl::Microseconds(5));
  bool saw_span = false;
  for (const Struct& e : ParseEvents(timeline.Stop(nullptr, nullptr))) {
    if (Str(e, "ph") != "X") continue;
    saw_span = true;
    EXPECT_EQ(Str(e.fields().at("args").struct_value(), "tensor"), "grad/w#3");
    EXPECT_EQ(Str(e, "name"), "REDUCED grad/w#3");
  }
  EXPECT_TRUE(saw_span);
}

}  // namespace
}  // namespace kolo::daemon
