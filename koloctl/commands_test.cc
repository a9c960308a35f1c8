// Runs every koloctl command against an in-process fake kolod (kolo.v1.Status
// and kolo.v1.Admin with canned answers) on a Unix socket, and checks what
// koloctl prints and sends.
#include "koloctl/commands.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "koloctl/cli.h"
#include "koloctl/connect.h"

namespace kolo::koloctl {
namespace {

constexpr char kToken[] = "s3cret-token";

// What the fake received, shared by its two services.
struct FakeState {
  absl::Mutex mu;
  std::string last_job_id ABSL_GUARDED_BY(mu);
  std::string last_reason ABSL_GUARDED_BY(mu);
  std::string last_level ABSL_GUARDED_BY(mu);
  uint64_t last_max_events ABSL_GUARDED_BY(mu) = 0;
  int stop_calls ABSL_GUARDED_BY(mu) = 0;
  int admin_calls_accepted ABSL_GUARDED_BY(mu) = 0;
};

kolo::v1::JobInfo CannedJob() {
  kolo::v1::JobInfo job;
  job.set_job_id("train-a");
  job.set_size(8);
  job.set_state("running");
  job.set_responses(1234);
  job.set_fused_tensors(5000);
  job.set_bytes_reduced(64ull << 20);
  job.set_uptime_s(3725);
  job.set_bytes_per_s(1.5 * (1 << 20));
  job.set_data_plane_negotiation(321);
  for (int r = 0; r < 8; ++r) {
    auto* rank = job.add_ranks();
    rank->set_rank(r);
    rank->set_pid(1000 + r);
    rank->set_session_id("s" + std::to_string(r));
    rank->set_submitted(100);
    rank->set_completed(99);
    rank->set_attached(r != 7);
    rank->set_last_submit_age_s(r == 3 || r == 7 ? -1 : 0.25);
    rank->set_last_complete_age_s(61);
  }
  auto* pending = job.add_pending();
  pending->set_name("grad/w1");
  pending->set_collective("allreduce");
  for (int r : {0, 1, 2, 4, 5, 6}) pending->add_submitted_ranks(r);
  pending->add_missing_ranks(3);
  pending->add_missing_ranks(7);
  pending->set_waiting_s(61);
  return job;
}

kolo::v1::Stall CannedStall() {
  kolo::v1::Stall stall;
  stall.set_job_id("train-a");
  stall.set_name("grad/w1");
  stall.set_collective("allreduce");
  stall.set_waiting_s(61);
  for (int r : {0, 1, 2, 4, 5, 6}) stall.add_submitted_ranks(r);
  stall.add_missing_ranks(3);
  stall.add_missing_ranks(7);
  stall.set_kind("missing_ranks");
  stall.set_message("allreduce \"grad/w1\" waiting 61 s for ranks 3,7 (submitted: 0-2,4-6)");
  return stall;
}

class FakeStatusService final : public kolo::v1::Status::Service {
 public:
  explicit FakeStatusService(FakeState* state) : state_(state) {}

  grpc::Status GetStatus(grpc::ServerContext*, const kolo::v1::GetStatusRequest*,
                         kolo::v1::GetStatusResponse* response) override {
    auto* node = response->mutable_node();
    node->set_version("1.2.3");
    node->set_hostname("node-7");
    node->set_pid(4242);
    node->set_uptime_s(3725);
    node->set_sessions(7);
    node->set_socket_path("/run/kolo/kolod.sock");
    node->set_fusion_threshold_bytes(64ull << 20);
    node->set_worker_threads(4);
    node->set_log_level("info");
    node->set_status_address("0.0.0.0:7370");
    node->set_metrics_port(9464);
    node->add_devices("cpu: 2 cores");
    (*node->mutable_config())["stall_warning_s"] = "60";
    (*node->mutable_config())["fusion_threshold"] = "67108864";
    node->set_stall_warning_s(60);
    *response->add_jobs() = CannedJob();
    auto* aborted = response->add_jobs();
    aborted->set_job_id("eval-b");
    aborted->set_size(2);
    aborted->set_state("aborted");
    aborted->set_error("rank 1 died (pid 77)");
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext*, const kolo::v1::GetJobRequest* request,
                      kolo::v1::JobDetail* response) override {
    if (request->job_id() != "train-a") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "job \"" + request->job_id() + "\" not found");
    }
    *response->mutable_job() = CannedJob();
    *response->add_stalls() = CannedStall();
    auto* done = response->add_recent();
    done->set_sequence(41);
    done->set_collective("allreduce");
    done->set_name("grad/b0");
    done->set_dtype("float32");
    done->set_op("sum");
    done->set_bytes(4096);
    done->set_phase("done");
    done->set_queued_at_s(12.5);
    done->set_ready_after_s(0.002);
    done->set_execute_s(0.001);
    done->set_fused_with(3);
    auto* failed = response->add_recent();
    failed->set_sequence(42);
    failed->set_collective("broadcast");
    failed->set_name("w0");
    failed->set_phase("failed");
    failed->set_error("rank 3 sent shape [4,5], rank 0 sent [4,4]");
    response->add_errors("broadcast \"w0\": rank 3 sent shape [4,5], rank 0 sent [4,4]");
    return grpc::Status::OK;
  }

  grpc::Status ListStalls(grpc::ServerContext*, const kolo::v1::ListStallsRequest*,
                          kolo::v1::ListStallsResponse* response) override {
    *response->add_stalls() = CannedStall();
    return grpc::Status::OK;
  }

  grpc::Status GetMetrics(grpc::ServerContext*, const kolo::v1::GetMetricsRequest*,
                          kolo::v1::GetMetricsResponse* response) override {
    response->set_text("# TYPE kolo_responses_total counter\nkolo_responses_total 1234\n");
    return grpc::Status::OK;
  }

  grpc::Status StartTimeline(grpc::ServerContext*, const kolo::v1::StartTimelineRequest* request,
                             kolo::v1::StartTimelineResponse*) override {
    absl::MutexLock lock(&state_->mu);
    state_->last_max_events = request->max_events();
    return grpc::Status::OK;
  }

  grpc::Status StopTimeline(grpc::ServerContext*, const kolo::v1::StopTimelineRequest*,
                            kolo::v1::StopTimelineResponse* response) override {
    absl::MutexLock lock(&state_->mu);
    ++state_->stop_calls;
    response->set_trace_json("{\"traceEvents\":[]}");
    response->set_events(12);
    response->set_dropped(1);
    return grpc::Status::OK;
  }

 private:
  FakeState* const state_;
};

class FakeAdminService final : public kolo::v1::Admin::Service {
 public:
  explicit FakeAdminService(FakeState* state) : state_(state) {}

  grpc::Status AbortJob(grpc::ServerContext* context, const kolo::v1::AbortJobRequest* request,
                        kolo::v1::AbortJobResponse*) override {
    if (grpc::Status s = Authorize(*context); !s.ok()) return s;
    absl::MutexLock lock(&state_->mu);
    state_->last_job_id = request->job_id();
    state_->last_reason = request->reason();
    return grpc::Status::OK;
  }

  grpc::Status Drain(grpc::ServerContext* context, const kolo::v1::DrainRequest*,
                     kolo::v1::DrainResponse* response) override {
    if (grpc::Status s = Authorize(*context); !s.ok()) return s;
    response->set_running_jobs(2);
    return grpc::Status::OK;
  }

  grpc::Status SetLogLevel(grpc::ServerContext* context,
                           const kolo::v1::SetLogLevelRequest* request,
                           kolo::v1::SetLogLevelResponse* response) override {
    if (grpc::Status s = Authorize(*context); !s.ok()) return s;
    absl::MutexLock lock(&state_->mu);
    state_->last_level = request->level();
    response->set_previous("info");
    return grpc::Status::OK;
  }

 private:
  // What kolod does: no authorization is UNAUTHENTICATED, a wrong one
  // PERMISSION_DENIED.
  grpc::Status Authorize(const grpc::ServerContext& context) {
    const auto& metadata = context.client_metadata();
    auto it = metadata.find("authorization");
    if (it == metadata.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "admin call without a token");
    }
    if (std::string(it->second.data(), it->second.size()) != std::string("Bearer ") + kToken) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "wrong admin token");
    }
    absl::MutexLock lock(&state_->mu);
    ++state_->admin_calls_accepted;
    return grpc::Status::OK;
  }

  FakeState* const state_;
};

// A fresh directory under /tmp: Unix socket paths must stay under 108
// bytes, which TEST_TMPDIR does not promise.
std::string MakeShortTempDir() {
  char pattern[] = "/tmp/koloctl-XXXXXX";
  const char* dir = mkdtemp(pattern);
  if (dir == nullptr) {
    ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
    return "/tmp";
  }
  return dir;
}

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeShortTempDir();
    socket_ = dir_ + "/kolod.sock";
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(&status_service_);
    builder.RegisterService(&admin_service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        Connect("unix:" + socket_, absl::Seconds(10));
    ASSERT_TRUE(channel.ok()) << channel.status();
    status_stub_ = kolo::v1::Status::NewStub(*channel);
    admin_stub_ = kolo::v1::Admin::NewStub(*channel);
    stubs_ = Stubs{status_stub_.get(), admin_stub_.get()};
    options_.admin_token = kToken;
    options_.admin_token_source = "--admin_token";
  }

  void TearDown() override {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    for (const std::string& file : created_) std::remove(file.c_str());
    std::remove(socket_.c_str());
    rmdir(dir_.c_str());
  }

  std::string Run(const std::vector<std::string>& args, absl::Status* status,
                  Environment env = {}) {
    absl::StatusOr<Invocation> inv = ParseCommandLine(args, env);
    if (!inv.ok()) {
      *status = inv.status();
      return "";
    }
    std::ostringstream out;
    *status = Execute(*inv, stubs_, out);
    return out.str();
  }

  FakeState state_;
  FakeStatusService status_service_{&state_};
  FakeAdminService admin_service_{&state_};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<kolo::v1::Status::Stub> status_stub_;
  std::unique_ptr<kolo::v1::Admin::Stub> admin_stub_;
  Stubs stubs_;
  CommandOptions options_;
  std::string dir_;
  std::string socket_;
  std::vector<std::string> created_;
};

TEST_F(CommandsTest, Status) {
  std::ostringstream out;
  ASSERT_TRUE(RunStatus(stubs_, options_, out).ok());
  const std::string text = out.str();
  EXPECT_TRUE(absl::StartsWith(text, "kolod 1.2.3 on node-7 (pid 4242), up 1h02m\n")) << text;
  EXPECT_NE(text.find("  fusion threshold  64 MiB\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  status address    0.0.0.0:7370\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  stall timeout     off\n"), std::string::npos) << text;
  EXPECT_NE(text.find("    fusion_threshold=67108864\n    stall_warning_s=60\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("jobs: 2\n"
                      "  train-a  running  size 8  7/8 attached  1 pending\n"
                      "  eval-b   aborted  size 2  0/2 attached  0 pending  error: rank 1 died "
                      "(pid 77)\n"),
            std::string::npos)
      << text;
}

TEST_F(CommandsTest, Jobs) {
  std::ostringstream out;
  ASSERT_TRUE(RunJobs(stubs_, options_, out).ok());
  EXPECT_EQ(out.str(),
            "JOB      SIZE  STATE    ATTACHED  RESPONSES   BYTES  THROUGHPUT  PENDING\n"
            "train-a     8  running       7/8       1234  64 MiB   1.5 MiB/s        1\n"
            "eval-b      2  aborted       0/2          0     0 B           -        0\n");
}

TEST_F(CommandsTest, Job) {
  std::ostringstream out;
  ASSERT_TRUE(RunJob(stubs_, options_, "train-a", out).ok());
  const std::string text = out.str();
  EXPECT_TRUE(absl::StartsWith(text, "job train-a: running, size 8, 7/8 attached, up 1h02m\n"))
      << text;
  EXPECT_NE(text.find("  negotiation messages over the data plane: 321\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("  RANK   PID  ATTACHED  SUBMITTED  COMPLETED  LAST SUBMIT  LAST COMPLETE"
                      "  SESSION\n"
                      "     0  1000  yes             100         99        250ms          1m01s"
                      "  s0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("     3  1003  yes             100         99        never"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  NAME     COLLECTIVE  WAITING  SUBMITTED  MISSING\n"
                      "  grad/w1  allreduce     1m01s  0-2,4-6    3,7\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("stalls:\n  allreduce \"grad/w1\" waiting 61 s for ranks 3,7 (submitted: "
                      "0-2,4-6)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("recent collectives (newest last):\n  SEQ  COLLECTIVE"), std::string::npos)
      << text;
  EXPECT_NE(
      text.find("   41  allreduce   grad/b0  float32  sum  4 KiB  done          12s          2ms"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 3 sent shape [4,5], rank 0 sent [4,4]\n\nerrors (newest last):\n"
                      "  broadcast \"w0\": rank 3 sent shape [4,5], rank 0 sent [4,4]\n"),
            std::string::npos)
      << text;
}

TEST_F(CommandsTest, UnknownJobIsTheDaemonsError) {
  std::ostringstream out;
  absl::Status s = RunJob(stubs_, options_, "nope", out);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_EQ(s.message(), "GetJob: job \"nope\" not found");
  EXPECT_EQ(out.str(), "");
}

TEST_F(CommandsTest, Stalls) {
  std::ostringstream out;
  ASSERT_TRUE(RunStalls(stubs_, options_, out).ok());
  EXPECT_EQ(out.str(),
            "train-a: allreduce \"grad/w1\" waiting 61 s for ranks 3,7 (submitted: 0-2,4-6)\n"
            "\n"
            "JOB      NAME     COLLECTIVE  KIND           WAITING  SUBMITTED  MISSING\n"
            "train-a  grad/w1  allreduce   missing_ranks    1m01s  0-2,4-6    3,7\n");
}

TEST_F(CommandsTest, MetricsPrintedAsIs) {
  std::ostringstream out;
  ASSERT_TRUE(RunMetrics(stubs_, options_, out).ok());
  EXPECT_EQ(out.str(), "# TYPE kolo_responses_total counter\nkolo_responses_total 1234\n");
}

TEST_F(CommandsTest, JsonModePrintsTheResponseMessage) {
  options_.json = true;
  std::ostringstream out;
  ASSERT_TRUE(RunJobs(stubs_, options_, out).ok());
  const std::string text = out.str();
  EXPECT_TRUE(absl::StartsWith(text, "{\n")) << text;
  EXPECT_NE(text.find("\"job_id\": \"train-a\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"bytes_reduced\": \"67108864\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"missing_ranks\": ["), std::string::npos) << text;
  EXPECT_EQ(text.find("jobId"), std::string::npos) << text;

  std::ostringstream metrics;
  ASSERT_TRUE(RunMetrics(stubs_, options_, metrics).ok());
  EXPECT_NE(metrics.str().find("\"text\": \"# TYPE kolo_responses_total counter\\n"),
            std::string::npos)
      << metrics.str();
}

TEST_F(CommandsTest, Timeline) {
  std::ostringstream start;
  ASSERT_TRUE(RunTimelineStart(stubs_, options_, 5000, start).ok());
  EXPECT_TRUE(absl::StartsWith(start.str(), "timeline recording (max events: 5000)"))
      << start.str();
  {
    absl::MutexLock lock(&state_.mu);
    EXPECT_EQ(state_.last_max_events, 5000u);
  }

  const std::string path = dir_ + "/trace.json";
  created_.push_back(path);
  std::ostringstream stop;
  ASSERT_TRUE(RunTimelineStop(stubs_, options_, path, stop).ok());
  EXPECT_EQ(stop.str(), "wrote 12 events (1 dropped) to " + path + "\n");
  std::ifstream file(path);
  std::stringstream content;
  content << file.rdbuf();
  EXPECT_EQ(content.str(), "{\"traceEvents\":[]}");

  options_.json = true;
  std::ostringstream json;
  ASSERT_TRUE(RunTimelineStop(stubs_, options_, path, json).ok());
  EXPECT_NE(json.str().find("\"events\": \"12\""), std::string::npos) << json.str();
  EXPECT_NE(json.str().find("\"trace_json\": \"\""), std::string::npos) << json.str();
}

TEST_F(CommandsTest, TimelineStopToAnUnwritablePathKeepsTheRecording) {
  std::ostringstream out;
  absl::Status s = RunTimelineStop(stubs_, options_, dir_ + "/no/such/dir/t.json", out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("cannot write"), std::string::npos) << s;
  absl::MutexLock lock(&state_.mu);
  EXPECT_EQ(state_.stop_calls, 0);
}

TEST_F(CommandsTest, AdminCallsSendTheBearerToken) {
  std::ostringstream abort_out;
  ASSERT_TRUE(RunAbort(stubs_, options_, "train-a", "operator request", abort_out).ok());
  EXPECT_EQ(abort_out.str(), "aborted job train-a\n");
  std::ostringstream drain_out;
  ASSERT_TRUE(RunDrain(stubs_, options_, drain_out).ok());
  EXPECT_EQ(drain_out.str(), "draining: new jobs are refused; 2 running job(s) will finish\n");
  std::ostringstream level_out;
  ASSERT_TRUE(RunLogLevel(stubs_, options_, "debug", level_out).ok());
  EXPECT_EQ(level_out.str(), "log level: info -> debug\n");
  absl::MutexLock lock(&state_.mu);
  EXPECT_EQ(state_.admin_calls_accepted, 3);
  EXPECT_EQ(state_.last_job_id, "train-a");
  EXPECT_EQ(state_.last_reason, "operator request");
  EXPECT_EQ(state_.last_level, "debug");
}

TEST_F(CommandsTest, WrongTokenIsReportedWithItsSource) {
  options_.admin_token = "guess";
  options_.admin_token_source = "/tmp/x/admin.token";
  std::ostringstream out;
  absl::Status s = RunDrain(stubs_, options_, out);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(s.message(), "Drain: wrong admin token (admin token from /tmp/x/admin.token)");
  EXPECT_EQ(out.str(), "");
}

TEST_F(CommandsTest, MissingTokenIsReported) {
  options_.admin_token.clear();
  options_.admin_token_source.clear();
  std::ostringstream out;
  absl::Status s = RunAbort(stubs_, options_, "train-a", "", out);
  EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
  EXPECT_EQ(s.message(), "AbortJob: admin call without a token");
  absl::MutexLock lock(&state_.mu);
  EXPECT_EQ(state_.last_job_id, "");
}

// The command line end to end: the token comes from admin.token beside the
// socket, as kolod writes it.
TEST_F(CommandsTest, CommandLineFindsTheTokenBesideTheSocket) {
  const std::string token_file = dir_ + "/admin.token";
  created_.push_back(token_file);
  std::ofstream(token_file) << kToken << "\n";
  absl::Status status;
  std::string text = Run({"--socket", socket_, "abort", "train-a", "--reason", "stuck"}, &status);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(text, "aborted job train-a\n");
  absl::MutexLock lock(&state_.mu);
  EXPECT_EQ(state_.last_reason, "stuck");
}

TEST_F(CommandsTest, CommandLineReadOnlyCommands) {
  absl::Status status;
  EXPECT_EQ(Run({"--socket", socket_, "metrics"}, &status),
            "# TYPE kolo_responses_total counter\nkolo_responses_total 1234\n");
  EXPECT_TRUE(status.ok()) << status;
  std::string text = Run({"stalls", "--json"}, &status, Environment{socket_, std::nullopt});
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_NE(text.find("\"kind\": \"missing_ranks\""), std::string::npos) << text;
}

TEST(ConnectTest, MissingSocketFailsAtOnce) {
  const std::string dir = MakeShortTempDir();
  const absl::Time start = absl::Now();
  auto channel = Connect("unix:" + dir + "/kolod.sock", absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_FALSE(channel.ok());
  EXPECT_TRUE(absl::IsUnavailable(channel.status()));
  EXPECT_TRUE(absl::StartsWith(
      channel.status().message(),
      "no kolod answering on unix:" + dir + "/kolod.sock (is it running? --socket/--address)"))
      << channel.status();
  rmdir(dir.c_str());
}

TEST(ConnectTest, RefusedConnectionFailsBeforeTheDeadline) {
  // A socket bound but not listening refuses connections, as a dead kolod's
  // leftover socket file does.
  const std::string dir = MakeShortTempDir();
  const std::string path = dir + "/kolod.sock";
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  const absl::Time start = absl::Now();
  auto channel = Connect("unix:" + path, absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_TRUE(absl::IsUnavailable(channel.status())) << channel.status();
  EXPECT_NE(std::string(channel.status().message()).find("no kolod answering"), std::string::npos);
  close(fd);
  std::remove(path.c_str());
  rmdir(dir.c_str());
}

TEST(ConnectTest, NotASocket) {
  const std::string dir = MakeShortTempDir();
  const std::string path = dir + "/kolod.sock";
  std::ofstream(path) << "x";
  auto channel = Connect("unix:" + path, absl::Seconds(30));
  EXPECT_TRUE(absl::IsUnavailable(channel.status())) << channel.status();
  EXPECT_NE(std::string(channel.status().message()).find("is not a socket"), std::string::npos);
  std::remove(path.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace kolo::koloctl
