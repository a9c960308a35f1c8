// Tests of what a Job reports about itself: stall views, the flight
// recorder in its snapshot, and the metrics and timeline it feeds.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "daemon/backend/fake_backend.h"
#include "daemon/job/default_negotiators.h"
#include "daemon/job/job.h"
#include "daemon/session/loopback_session.h"
#include "daemon/observe/metrics.h"
#include "daemon/observe/timeline.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr uint64_t kFusionThreshold = 64 << 20;
constexpr absl::Duration kWarning = absl::Seconds(60);

class JobObservabilityTest : public ::testing::Test {
 protected:
  // Builds the job with `size` ranks, each with its own loopback session.
  void MakeJob(int size) {
    for (int r = 0; r < size; ++r) {
      auto s = LoopbackSession::Create("job-1", r);
      ASSERT_TRUE(s.ok()) << s.status();
      sessions_.push_back(std::move(*s));
    }
    JobObservers observers;
    observers.metrics = &metrics_;
    observers.timeline = &timeline_;
    observers.flight_records = 16;
    observers.flight_errors = 4;
    job_ = std::make_unique<Job>("job-1", "token", size, &backend_, kFusionThreshold,
                                 DefaultNegotiators(), observers);
    for (int r = 0; r < size; ++r) {
      ASSERT_TRUE(job_->AttachRank(r, "s", 100 + r).ok());
    }
    job_->MaybeStart();
  }

  // A request of `rank` for `name` submitted at `at`. The fake backend never
  // reads tensor data, so the buffers stay null.
  Request MakeRequest(int rank, const std::string& name, absl::Time at,
                      DType dtype = DType::kFloat32) {
    Request r;
    r.request_id = next_request_id_++;
    r.rank = rank;
    r.name = name;
    r.kind = CollectiveKind::kAllreduce;
    r.dtype = dtype;
    r.shape = {4};
    r.bytes = 16;
    r.origin = sessions_[rank]->session();
    r.submitted_at = at;
    return r;
  }

  // Every completion rank `rank` has received so far.
  std::vector<ReceivedCompletion> Completions(int rank) {
    return sessions_[rank]->TakeCompletions();
  }

  Metrics metrics_;
  Timeline timeline_;
  FakeBackend backend_;
  std::vector<std::unique_ptr<LoopbackSession>> sessions_;
  std::unique_ptr<Job> job_;  // declared last: destroyed before the rest
  uint64_t next_request_id_ = 1;
};

// Holds the thread that submits a name's last rank while the backend is
// blocked; releases the backend and joins on every exit path.
class BlockedExecutor {
 public:
  BlockedExecutor(FakeBackend* backend, Job* job, Request last) : backend_(backend) {
    backend_->BlockNextExecution();
    thread_ = std::thread([job, r = std::move(last)]() mutable { job->Submit(std::move(r)); });
  }
  ~BlockedExecutor() { Finish(); }
  void Finish() {
    backend_->Release();
    if (thread_.joinable()) thread_.join();
  }

 private:
  FakeBackend* backend_;
  std::thread thread_;
};

TEST_F(JobObservabilityTest, StallsNamesMissingAndSubmittedRanksPastTheWarning) {
  MakeJob(3);
  const absl::Time t0 = absl::Now();
  job_->Submit(MakeRequest(0, "grad/w1", t0));
  job_->Submit(MakeRequest(1, "grad/w1", t0 + absl::Seconds(1)));

  EXPECT_THAT(job_->Stalls(t0 + absl::Seconds(59), kWarning), IsEmpty());

  std::vector<StallView> stalls = job_->Stalls(t0 + absl::Seconds(61), kWarning);
  ASSERT_EQ(stalls.size(), 1u);
  const StallView& s = stalls[0];
  EXPECT_EQ(s.name, "grad/w1");
  EXPECT_EQ(s.kind, CollectiveKind::kAllreduce);
  EXPECT_THAT(s.submitted, ElementsAre(0, 1));
  EXPECT_THAT(s.missing, ElementsAre(2));
  EXPECT_FALSE(s.executing);
  EXPECT_EQ(s.since, t0);  // the first submission, not the latest
  EXPECT_EQ(s.waiting, absl::Seconds(61));
  EXPECT_EQ(s.message, "allreduce \"grad/w1\" waiting 61 s for ranks 2 (submitted: 0-1)");
  EXPECT_THAT(backend_.executed(), IsEmpty());

  // Once the last rank submits, it runs and the stall is gone.
  job_->Submit(MakeRequest(2, "grad/w1", t0 + absl::Seconds(62)));
  EXPECT_THAT(job_->Stalls(t0 + absl::Seconds(600), kWarning), IsEmpty());
  for (int r = 0; r < 3; ++r) {
    auto done = Completions(r);
    ASSERT_EQ(done.size(), 1u) << "rank " << r;
    EXPECT_EQ(done[0].code, absl::StatusCode::kOk) << done[0].message;
  }
}

TEST_F(JobObservabilityTest, StallMessageCompactsRankRanges) {
  MakeJob(8);
  const absl::Time t0 = absl::Now();
  for (int r : {0, 1, 2, 4, 5, 6}) job_->Submit(MakeRequest(r, "grad/w1", t0));
  job_->Submit(MakeRequest(0, "grad/w2", t0 + absl::Seconds(30)));

  // Only grad/w1 has waited past the warning.
  std::vector<StallView> stalls = job_->Stalls(t0 + absl::Seconds(61), kWarning);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_THAT(stalls[0].missing, ElementsAre(3, 7));
  EXPECT_EQ(stalls[0].message,
            "allreduce \"grad/w1\" waiting 61 s for ranks 3,7 (submitted: 0-2,4-6)");

  EXPECT_EQ(job_->Stalls(t0 + absl::Seconds(91), kWarning).size(), 2u);
}

TEST_F(JobObservabilityTest, ExecutionStuckInTheBackendIsReportedAsExecuting) {
  MakeJob(2);
  job_->Submit(MakeRequest(0, "grad/w1", absl::Now()));
  BlockedExecutor executor(&backend_, job_.get(), MakeRequest(1, "grad/w1", absl::Now()));
  ASSERT_TRUE(backend_.EnteredWithin(absl::Seconds(30)));
  const absl::Time entered = absl::Now();

  EXPECT_THAT(job_->Stalls(entered, kWarning), IsEmpty());

  std::vector<StallView> stalls = job_->Stalls(entered + absl::Seconds(61), kWarning);
  ASSERT_EQ(stalls.size(), 1u);
  const StallView& s = stalls[0];
  EXPECT_TRUE(s.executing);
  EXPECT_EQ(s.name, "grad/w1");
  EXPECT_THAT(s.submitted, ElementsAre(0, 1));
  EXPECT_THAT(s.missing, IsEmpty());
  EXPECT_GE(s.waiting, absl::Seconds(61));
  EXPECT_TRUE(absl::StrContains(s.message, "executing")) << s.message;
  EXPECT_TRUE(absl::StrContains(s.message, "fake backend")) << s.message;
  EXPECT_TRUE(absl::StartsWith(s.message, "allreduce \"grad/w1\" executing for 61 s")) << s.message;
  // The same stall is identified by the same `since` at every look.
  EXPECT_EQ(job_->Stalls(entered + absl::Seconds(120), kWarning)[0].since, s.since);

  executor.Finish();
  EXPECT_THAT(job_->Stalls(entered + absl::Seconds(600), kWarning), IsEmpty());
  EXPECT_EQ(Completions(0).size(), 1u);
  EXPECT_EQ(Completions(1).size(), 1u);
}

TEST_F(JobObservabilityTest, SnapshotWithHistoryCarriesRecordsOfCompletedCollectives) {
  MakeJob(2);
  const absl::Time t0 = absl::Now();
  job_->Submit(MakeRequest(0, "grad/w1", t0));
  job_->Submit(MakeRequest(1, "grad/w1", t0 + absl::Milliseconds(5)));

  JobSnapshot plain = job_->Snapshot();
  EXPECT_THAT(plain.recent, IsEmpty());
  EXPECT_EQ(plain.responses, 1u);

  JobSnapshot snap = job_->Snapshot(/*with_history=*/true);
  ASSERT_EQ(snap.recent.size(), 1u);
  const CollectiveRecord& rec = snap.recent[0];
  EXPECT_EQ(rec.sequence, 1u);
  EXPECT_EQ(rec.name, "grad/w1");
  EXPECT_EQ(rec.kind, CollectiveKind::kAllreduce);
  EXPECT_EQ(rec.dtype, DType::kFloat32);
  EXPECT_EQ(rec.bytes, 16u);
  EXPECT_FALSE(rec.failed);
  EXPECT_EQ(rec.first_submitted, t0);
  EXPECT_EQ(rec.ready_at, t0 + absl::Milliseconds(5));
  EXPECT_EQ(rec.fused_with, 0);
  EXPECT_THAT(snap.errors, IsEmpty());
  EXPECT_FALSE(snap.aborted);
}

// Ingress hands a batch of requests over with Accept and then calls
// Progress once: the names the batch made ready run as one fused response.
TEST_F(JobObservabilityTest, NamesReadyInOneBatchAreFused) {
  MakeJob(2);
  for (const char* name : {"a", "b", "c"}) job_->Accept(MakeRequest(0, name, absl::Now()));
  for (const char* name : {"a", "b", "c"}) job_->Accept(MakeRequest(1, name, absl::Now()));
  EXPECT_THAT(backend_.executed(), IsEmpty()) << "Accept alone must not run anything";
  job_->Progress();
  ASSERT_EQ(backend_.executed().size(), 1u);
  EXPECT_THAT(backend_.executed()[0], ElementsAre("a", "b", "c"));
  EXPECT_EQ(Completions(0).size(), 3u);
  EXPECT_EQ(Completions(1).size(), 3u);
}

TEST_F(JobObservabilityTest, MismatchIsRecordedAsAFailedRecordAndAnError) {
  MakeJob(2);
  job_->Submit(MakeRequest(0, "grad/w1", absl::Now(), DType::kFloat32));
  job_->Submit(MakeRequest(1, "grad/w1", absl::Now(), DType::kFloat64));

  EXPECT_THAT(backend_.executed(), IsEmpty());
  JobSnapshot snap = job_->Snapshot(true);
  ASSERT_EQ(snap.recent.size(), 1u);
  EXPECT_TRUE(snap.recent[0].failed);
  EXPECT_TRUE(absl::StrContains(snap.recent[0].error, "dtype")) << snap.recent[0].error;
  ASSERT_EQ(snap.errors.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(snap.errors[0], "FAILED_PRECONDITION")) << snap.errors[0];
  EXPECT_TRUE(absl::StrContains(snap.errors[0], "grad/w1")) << snap.errors[0];
  for (int r = 0; r < 2; ++r) {
    auto done = Completions(r);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].code, absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_TRUE(absl::StrContains(metrics_.Render(), "\nkolo_errors_total{op=\"allreduce\"} 1\n"));
}

TEST_F(JobObservabilityTest, BackendFailureIsRecordedAsAFailedRecordAndAnError) {
  MakeJob(2);
  backend_.set_result(absl::InternalError("link down"));
  job_->Submit(MakeRequest(0, "grad/w1", absl::Now()));
  job_->Submit(MakeRequest(1, "grad/w1", absl::Now()));
  JobSnapshot snap = job_->Snapshot(true);
  ASSERT_EQ(snap.recent.size(), 1u);
  EXPECT_TRUE(snap.recent[0].failed);
  EXPECT_EQ(snap.recent[0].error, "link down");
  EXPECT_THAT(snap.errors, ElementsAre("INTERNAL: link down"));
  EXPECT_EQ(Completions(1).at(0).code, absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(metrics_.Render(), "\nkolo_errors_total{op=\"allreduce\"} 1\n"));
}

TEST_F(JobObservabilityTest, AbortIsRecordedAsAnErrorAndFailsPendingAndLaterRequests) {
  MakeJob(2);
  job_->Submit(MakeRequest(0, "grad/w1", absl::Now()));
  job_->Abort(absl::DeadlineExceededError("stalled"));
  job_->Abort(absl::CancelledError("second abort is ignored"));

  JobSnapshot snap = job_->Snapshot(true);
  EXPECT_TRUE(snap.aborted);
  EXPECT_EQ(snap.error, "stalled");
  EXPECT_THAT(snap.errors, ElementsAre("DEADLINE_EXCEEDED: stalled"));
  EXPECT_THAT(snap.pending, IsEmpty());
  auto done = Completions(0);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].code, absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(done[0].message, "stalled");

  // Later submissions are refused with the abort status, and do not push
  // copies of it into the error ring (which would evict the errors that
  // explain the abort).
  for (int i = 0; i < 6; ++i) job_->Submit(MakeRequest(1, "grad/w1", absl::Now()));
  done = Completions(1);
  ASSERT_EQ(done.size(), 6u);
  EXPECT_EQ(done[0].code, absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(job_->Snapshot(true).errors, ElementsAre("DEADLINE_EXCEEDED: stalled"));
  EXPECT_THAT(job_->Stalls(absl::Now() + absl::Hours(1), kWarning), IsEmpty());
}

TEST_F(JobObservabilityTest, MetricsCountTensorsAndFusedResponses) {
  MakeJob(2);
  job_->Submit(MakeRequest(0, "a", absl::Now()));
  {
    // While "a" is stuck in the backend, "b" and "c" become ready; the
    // executor then runs them as one fused response.
    BlockedExecutor executor(&backend_, job_.get(), MakeRequest(1, "a", absl::Now()));
    ASSERT_TRUE(backend_.EnteredWithin(absl::Seconds(30)));
    for (const char* name : {"b", "c"}) {
      job_->Submit(MakeRequest(0, name, absl::Now()));
      job_->Submit(MakeRequest(1, name, absl::Now()));
    }
    executor.Finish();
  }
  ASSERT_EQ(backend_.executed().size(), 2u);
  EXPECT_THAT(backend_.executed()[1], ElementsAre("b", "c"));

  const std::string text = metrics_.Render();
  EXPECT_TRUE(
      absl::StrContains(text, "\nkolo_collectives_total{op=\"allreduce\",dtype=\"float32\"} 3\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "\nkolo_responses_total{op=\"allreduce\"} 2\n")) << text;
  EXPECT_TRUE(
      absl::StrContains(text, "\nkolo_bytes_total{op=\"allreduce\",dtype=\"float32\"} 48\n"))
      << text;
  EXPECT_TRUE(
      absl::StrContains(text, "\nkolo_collective_latency_seconds_count{op=\"allreduce\"} 3\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "\nkolo_errors_total{op=\"allreduce\"} 0\n"));

  JobSnapshot snap = job_->Snapshot(true);
  ASSERT_EQ(snap.recent.size(), 3u);
  EXPECT_EQ(snap.recent[0].fused_with, 0);
  EXPECT_EQ(snap.recent[1].fused_with, 1);
  EXPECT_EQ(snap.recent[2].fused_with, 1);
  EXPECT_EQ(snap.recent[2].sequence, 3u);
  EXPECT_EQ(snap.responses, 2u);
  EXPECT_EQ(snap.fused_tensors, 3u);
}

TEST_F(JobObservabilityTest, TimelineGetsEveryPhaseOfEveryRank) {
  MakeJob(2);
  timeline_.Start(1000);
  job_->Submit(MakeRequest(0, "grad/w1", absl::Now()));
  job_->Submit(MakeRequest(1, "grad/w1", absl::Now()));
  uint64_t events = 0, dropped = 0;
  const std::string json = timeline_.Stop(&events, &dropped);
  // Per rank: QUEUED, NEGOTIATED, FUSED, REDUCED, DONE.
  EXPECT_EQ(events, 10u);
  EXPECT_EQ(dropped, 0u);
  for (const char* phase : {"QUEUED", "NEGOTIATED", "FUSED", "REDUCED", "DONE"}) {
    EXPECT_TRUE(absl::StrContains(json, std::string("\"name\":\"") + phase + " grad/w1\""))
        << phase << " in " << json;
  }
  EXPECT_TRUE(absl::StrContains(json, "\"backend\":\"fake\"")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"name\":\"job job-1\"")) << json;

  // Stopped: the next collective leaves no trace.
  job_->Submit(MakeRequest(0, "grad/w2", absl::Now()));
  job_->Submit(MakeRequest(1, "grad/w2", absl::Now()));
  timeline_.Start(1000);
  timeline_.Stop(&events, &dropped);
  EXPECT_EQ(events, 0u);
}

// Two jobs report to one node timeline; each job's own timeline holds only
// that job's events, and records whether or not the node's does.
TEST_F(JobObservabilityTest, AJobsTimelineHoldsOnlyItsOwnEvents) {
  MakeJob(2);
  std::vector<std::unique_ptr<LoopbackSession>> other_sessions;
  for (int r = 0; r < 2; ++r) {
    auto s = LoopbackSession::Create("job-2", r);
    ASSERT_TRUE(s.ok()) << s.status();
    other_sessions.push_back(std::move(*s));
  }
  JobObservers observers;
  observers.timeline = &timeline_;
  Job other("job-2", "token", 2, &backend_, kFusionThreshold,
                                 DefaultNegotiators(), observers);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(other.AttachRank(r, "s", 200 + r).ok());
  other.MaybeStart();
  auto submit_other = [&](int rank, const std::string& name) {
    Request r = MakeRequest(rank, name, absl::Now());
    r.origin = other_sessions[rank]->session();
    other.Submit(std::move(r));
  };

  timeline_.Start(1000);
  job_->timeline().Start(1000);
  for (int r = 0; r < 2; ++r) job_->Submit(MakeRequest(r, "mine", absl::Now()));
  for (int r = 0; r < 2; ++r) submit_other(r, "theirs");
  // A refused name (the ranks disagree on the dtype) is recorded too.
  job_->Submit(MakeRequest(0, "refused", absl::Now(), DType::kFloat32));
  job_->Submit(MakeRequest(1, "refused", absl::Now(), DType::kFloat64));

  absl::StatusOr<TimelineTrace> mine = job_->timeline().StopRecording();
  ASSERT_TRUE(mine.ok()) << mine.status();
  // Per rank: five phases of "mine", and QUEUED, NEGOTIATED, DONE of "refused".
  EXPECT_EQ(mine->events, 16u);
  EXPECT_EQ(mine->dropped, 0u);
  for (const char* want : {"\"name\":\"job job-1\"", "\"name\":\"REDUCED mine\"",
                           "\"name\":\"DONE refused\"", "\"tid\":0,", "\"tid\":1,"}) {
    EXPECT_TRUE(absl::StrContains(mine->json, want)) << want << " in " << mine->json;
  }
  EXPECT_FALSE(absl::StrContains(mine->json, "theirs")) << mine->json;
  EXPECT_FALSE(absl::StrContains(mine->json, "job-2")) << mine->json;

  absl::StatusOr<TimelineTrace> node = timeline_.StopRecording();
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->events, 26u);
  for (const char* want : {"\"name\":\"job job-1\"", "\"name\":\"job job-2\"",
                           "\"name\":\"REDUCED mine\"", "\"name\":\"REDUCED theirs\""}) {
    EXPECT_TRUE(absl::StrContains(node->json, want)) << want << " in " << node->json;
  }

  // The other job's timeline was never started: nothing to stop.
  EXPECT_EQ(other.timeline().StopRecording().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(job_->timeline().StopRecording().status().code(),
            absl::StatusCode::kFailedPrecondition);

  // A job's timeline records while the node's is stopped.
  job_->timeline().Start(0);
  for (int r = 0; r < 2; ++r) job_->Submit(MakeRequest(r, "alone", absl::Now()));
  EXPECT_FALSE(timeline_.recording());
  mine = job_->timeline().StopRecording();
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->events, 10u);
  EXPECT_TRUE(absl::StrContains(mine->json, "\"name\":\"FUSED alone\"")) << mine->json;
}

}  // namespace
}  // namespace kolo::daemon
