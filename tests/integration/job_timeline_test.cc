// A job's own timeline against a real kolod: libkolo's StartTimeline and
// StopTimeline (Node.JobTimeline), what the trace holds (the caller's job
// only, a row per local rank), and the refusals of the call: an unknown
// session, an action that is neither start nor stop, max_events over the
// limit, a stop with nothing recording.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "kolo/kolo.h"
#include "proto/kolo/v1/node.grpc.pb.h"
#include "tests/integration/harness.h"

namespace kolo::testing {
namespace {

// kolod's default and limit for one job's timeline (AttachPolicy).
constexpr uint64_t kJobTimelineLimit = uint64_t{1} << 20;

class JobTimelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = DaemonProcess::Start(MakeTempDir() + "/kolod.sock");
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_.emplace(std::move(*d));
  }

  // The `size` ranks of job `job_id`, all attached to this kolod.
  std::vector<std::unique_ptr<Client>> Attach(const std::string& job_id, int size,
                                              const std::string& token = kTestJobToken) {
    std::vector<std::unique_ptr<Client>> ranks;
    for (int r = 0; r < size; ++r) {
      ClientOptions o;
      o.socket_path = daemon_->socket_path();
      o.job_id = job_id;
      o.job_token = token;
      o.rank = o.local_rank = r;
      o.size = o.local_size = size;
      o.arena_bytes = 1 << 20;
      auto c = Client::Connect(o);
      EXPECT_TRUE(c.ok()) << c.status();
      if (c.ok()) ranks.push_back(std::move(*c));
    }
    return ranks;
  }

  // An allreduce of `name` on every rank of `ranks`, submitted by all before
  // any is waited for; then a barrier, after which kolod has recorded it
  // (the executor runs a job's responses one at a time, in order).
  static void Allreduce(const std::vector<std::unique_ptr<Client>>& ranks,
                        const std::string& name) {
    std::vector<std::vector<float>> data(ranks.size(), std::vector<float>(4, 1.0f));
    std::vector<Handle> handles;
    for (size_t r = 0; r < ranks.size(); ++r) {
      TensorView v{data[r].data(), DType::kFloat32, {4}};
      auto h = ranks[r]->AllreduceAsync(v, v, name);
      ASSERT_TRUE(h.ok()) << h.status();
      handles.push_back(*h);
    }
    for (size_t r = 0; r < ranks.size(); ++r) {
      ASSERT_TRUE(ranks[r]->Wait(handles[r]).ok());
      EXPECT_EQ(data[r][0], static_cast<float>(ranks.size())) << name;
    }
    Barrier(ranks);
  }

  static void Barrier(const std::vector<std::unique_ptr<Client>>& ranks) {
    std::vector<std::thread> threads;
    for (const auto& c : ranks) {
      threads.emplace_back([&c] { EXPECT_TRUE(c->Barrier().ok()); });
    }
    for (auto& t : threads) t.join();
  }

  // Calls Node.JobTimeline directly, as a client that is not libkolo could.
  grpc::Status RawJobTimeline(const kolo::v1::JobTimelineRequest& request,
                              kolo::v1::JobTimelineResponse* response) {
    auto channel =
        grpc::CreateChannel("unix:" + daemon_->socket_path(), grpc::InsecureChannelCredentials());
    auto stub = kolo::v1::Node::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub->JobTimeline(&ctx, request, response);
  }

  std::optional<DaemonProcess> daemon_;
};

// The tensor names of the trace's events, by thread row (rank), and the
// process rows' names.
struct ParsedTrace {
  std::map<int, std::vector<std::string>> names_by_tid;
  std::vector<std::string> processes;
};

ParsedTrace Parse(const std::string& json) {
  ParsedTrace out;
  google::protobuf::Struct trace;
  auto s = google::protobuf::util::JsonStringToMessage(json, &trace);
  EXPECT_TRUE(s.ok()) << s.ToString() << "\n" << json.substr(0, 1000);
  auto events = trace.fields().find("traceEvents");
  if (events == trace.fields().end()) {
    ADD_FAILURE() << "no traceEvents in " << json.substr(0, 1000);
    return out;
  }
  for (const auto& v : events->second.list_value().values()) {
    const auto& f = v.struct_value().fields();
    if (f.at("ph").string_value() == "M") {
      out.processes.push_back(f.at("args").struct_value().fields().at("name").string_value());
      continue;
    }
    const int tid = static_cast<int>(f.at("tid").number_value());
    out.names_by_tid[tid].push_back(f.at("name").string_value());
  }
  return out;
}

bool Has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST_F(JobTimelineTest, RecordsOnlyTheCallersJobWithARowPerLocalRank) {
  auto job = Attach("job-traced", 2);
  auto other = Attach("job-other", 1, "0ther-token-0ther-token-0ther-tok");
  ASSERT_EQ(job.size(), 2u);
  ASSERT_EQ(other.size(), 1u);

  // Any local rank may start it.
  ASSERT_TRUE(job[1]->StartTimeline().ok());
  Allreduce(job, "grad/w1");
  Allreduce(other, "other/grad");
  Allreduce(job, "grad/w2");
  absl::StatusOr<TimelineTrace> trace = job[0]->StopTimeline();
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->dropped, 0u);
  EXPECT_GE(trace->events, 2u * 2u * 5u);  // two tensors, two ranks, five phases
  EXPECT_FALSE(absl::StrContains(trace->json, "other")) << trace->json;

  ParsedTrace parsed = Parse(trace->json);
  EXPECT_EQ(parsed.processes, std::vector<std::string>{"job job-traced"});
  ASSERT_EQ(parsed.names_by_tid.size(), 2u);
  for (int rank : {0, 1}) {
    const auto& names = parsed.names_by_tid[rank];
    for (const char* phase : {"QUEUED", "NEGOTIATED", "FUSED", "REDUCED", "DONE"}) {
      for (const char* tensor : {"grad/w1", "grad/w2"}) {
        EXPECT_TRUE(Has(names, absl::StrCat(phase, " ", tensor)))
            << "rank " << rank << ": " << phase << " " << tensor;
      }
    }
  }

  // Stopped: a second stop says there is nothing to stop, naming the job.
  absl::StatusOr<TimelineTrace> again = job[0]->StopTimeline();
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(again.status().message(), "job-traced")) << again.status();
  EXPECT_TRUE(absl::StrContains(again.status().message(), "start one first")) << again.status();
}

TEST_F(JobTimelineTest, StartWhileRecordingRestartsAndMaxEventsBoundsIt) {
  auto job = Attach("job-restart", 2);
  ASSERT_EQ(job.size(), 2u);
  ASSERT_TRUE(job[0]->StartTimeline().ok());
  Allreduce(job, "before");
  ASSERT_TRUE(job[0]->StartTimeline().ok());  // restarts: "before" is dropped
  Allreduce(job, "after");
  absl::StatusOr<TimelineTrace> trace = job[0]->StopTimeline();
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_TRUE(absl::StrContains(trace->json, "\"REDUCED after\"")) << trace->json;
  EXPECT_FALSE(absl::StrContains(trace->json, "before")) << trace->json;

  // Three events kept; the rest counted as dropped.
  ASSERT_TRUE(job[0]->StartTimeline(3).ok());
  Allreduce(job, "bounded");
  trace = job[0]->StopTimeline();
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->events, 3u);
  EXPECT_GT(trace->dropped, 0u);

  // The limit is allowed, one more is refused and starts nothing.
  ASSERT_TRUE(job[0]->StartTimeline(kJobTimelineLimit).ok());
  ASSERT_TRUE(job[0]->StopTimeline().ok());
  absl::Status over = job[0]->StartTimeline(kJobTimelineLimit + 1);
  EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument) << over;
  EXPECT_TRUE(absl::StrContains(over.message(), absl::StrCat(kJobTimelineLimit + 1))) << over;
  EXPECT_EQ(job[0]->StopTimeline().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(JobTimelineTest, RefusesUnknownSessionsAndUnknownActions) {
  auto job = Attach("job-raw", 1);
  ASSERT_EQ(job.size(), 1u);

  kolo::v1::JobTimelineRequest req;
  kolo::v1::JobTimelineResponse resp;
  req.set_action(kolo::v1::JobTimelineRequest::START);
  for (const std::string& id : {std::string(), std::string(32, '0'), std::string(100000, 'x'),
                                job[0]->session_id() + "0"}) {
    req.set_session_id(id);
    grpc::Status s = RawJobTimeline(req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << id.size();
    // The untrusted id is not echoed back.
    EXPECT_LT(s.error_message().size(), 200u) << s.error_message();
  }

  req.set_session_id(job[0]->session_id());
  req.set_action(kolo::v1::JobTimelineRequest::ACTION_UNSPECIFIED);
  EXPECT_EQ(RawJobTimeline(req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req.set_action(static_cast<kolo::v1::JobTimelineRequest::Action>(7));
  EXPECT_EQ(RawJobTimeline(req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req.set_action(kolo::v1::JobTimelineRequest::STOP);
  EXPECT_EQ(RawJobTimeline(req, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  req.set_action(kolo::v1::JobTimelineRequest::START);
  req.set_max_events(UINT64_MAX);
  EXPECT_EQ(RawJobTimeline(req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // The session id works through the raw call as through libkolo.
  req.set_max_events(0);
  ASSERT_TRUE(RawJobTimeline(req, &resp).ok());
  absl::StatusOr<TimelineTrace> trace = job[0]->StopTimeline();
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->events, 0u);

  // Once the session ended, its id names nothing (kolod forgets it as the
  // session's stream closes, just after the client is gone).
  const std::string gone = job[0]->session_id();
  job.clear();
  req.set_session_id(gone);
  grpc::StatusCode code = grpc::StatusCode::OK;
  WaitUntil(
      [&] {
        code = RawJobTimeline(req, &resp).error_code();
        return code == grpc::StatusCode::NOT_FOUND;
      },
      absl::Seconds(20), absl::Milliseconds(20));
  EXPECT_EQ(code, grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace kolo::testing
