// Operating kolod: stall reports that name the missing ranks, the stall
// timeout, admin calls behind the token, draining, the timeline, metrics over
// gRPC and HTTP, Status over TCP, and koloctl against a real daemon.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "proto/kolo/v1/status.grpc.pb.h"
#include "tests/integration/harness.h"

namespace kolo::testing {
namespace {

constexpr char kKoloctlPath[] = "koloctl/koloctl";

std::string RunCommand(const std::string& command, int* exit_code) {
  std::string out;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return "popen failed";
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = pclose(p);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  std::string req = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: localhost\r\n\r\n");
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

class OperateTest : public ::testing::Test {
 protected:
  void StartDaemon(std::vector<std::string> args) {
    dir_ = MakeTempDir();
    args.push_back("--metrics_address=127.0.0.1:0");
    auto d = DaemonProcess::Start(dir_ + "/kolod.sock", args);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_.emplace(std::move(*d));
    channel_ =
        grpc::CreateChannel("unix:" + daemon_->socket_path(), grpc::InsecureChannelCredentials());
    status_ = kolo::v1::Status::NewStub(channel_);
    admin_ = kolo::v1::Admin::NewStub(channel_);
    token_ = ReadFile(dir_ + "/admin.token");
    while (!token_.empty() && token_.back() == '\n') token_.pop_back();
    ASSERT_GE(token_.size(), 16u);
  }

  kolo::v1::GetStatusResponse GetStatus() {
    grpc::ClientContext ctx;
    Authorize(&ctx, token_);
    kolo::v1::GetStatusResponse resp;
    EXPECT_TRUE(status_->GetStatus(&ctx, {}, &resp).ok());
    return resp;
  }

  // Polls ListStalls until a stall of `name` appears.
  kolo::v1::Stall WaitForStall(const std::string& name) {
    std::optional<kolo::v1::Stall> found;
    const bool seen = WaitUntil(
        [&] {
          grpc::ClientContext ctx;
          Authorize(&ctx, token_);
          kolo::v1::ListStallsResponse resp;
          EXPECT_TRUE(status_->ListStalls(&ctx, {}, &resp).ok());
          for (const auto& s : resp.stalls()) {
            if (s.name() == name) found = s;
          }
          return found.has_value();
        },
        absl::Seconds(20), absl::Milliseconds(50));
    if (!seen) {
      ADD_FAILURE() << "no stall for " << name;
      return {};
    }
    return *found;
  }

  void Authorize(grpc::ClientContext* ctx, const std::string& token) {
    ctx->AddMetadata("authorization", "Bearer " + token);
  }

  std::string dir_;
  std::optional<DaemonProcess> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<kolo::v1::Status::Stub> status_;
  std::unique_ptr<kolo::v1::Admin::Stub> admin_;
  std::string token_;
};

TEST_F(OperateTest, StalledJobNamesTheMissingRankAndTheOperatorAbortsIt) {
  StartDaemon({"--stall_warning_s=1"});
  auto ranks = Ranks::Start(daemon_->socket_path(), "job-stall", 3, {kTestRankPath, "withhold"});
  ASSERT_TRUE(ranks.ok());
  ASSERT_TRUE(ranks->WaitForOutput(2, "withholding", absl::Seconds(20)));

  kolo::v1::Stall stall = WaitForStall("grad/w1");
  EXPECT_EQ(stall.job_id(), "job-stall");
  EXPECT_EQ(stall.kind(), "missing_ranks");
  ASSERT_EQ(stall.missing_ranks_size(), 1);
  EXPECT_EQ(stall.missing_ranks(0), 2);
  EXPECT_TRUE(absl::StrContains(stall.message(), "allreduce \"grad/w1\" waiting"))
      << stall.message();
  EXPECT_TRUE(absl::StrContains(stall.message(), "for ranks 2 (submitted: 0-1)"))
      << stall.message();

  // The job view: ranks with their last activity, stalls, recent collectives.
  grpc::ClientContext jctx;
  Authorize(&jctx, token_);
  kolo::v1::GetJobRequest jreq;
  jreq.set_job_id("job-stall");
  kolo::v1::JobDetail detail;
  ASSERT_TRUE(status_->GetJob(&jctx, jreq, &detail).ok());
  EXPECT_EQ(detail.job().ranks_size(), 3);
  EXPECT_GE(detail.stalls_size(), 1);
  ASSERT_GE(detail.recent_size(), 1);
  EXPECT_EQ(detail.recent(0).name(), "warmup");
  EXPECT_EQ(detail.recent(0).phase(), "done");
  for (const auto& r : detail.job().ranks()) {
    EXPECT_TRUE(r.attached());
    EXPECT_GE(r.last_submit_age_s(), 0);
  }

  // The daemon logged it.
  WaitUntil(
      [&] {
        return absl::StrContains(ReadFile(daemon_->socket_path() + ".log"),
                                 "stall: allreduce \"grad/w1\"");
      },
      absl::Seconds(10), absl::Milliseconds(50));
  EXPECT_TRUE(absl::StrContains(ReadFile(daemon_->socket_path() + ".log"),
                                "stall: allreduce \"grad/w1\" waiting"));

  // koloctl, as an operator runs it.
  int code = -1;
  std::string out = RunCommand(
      absl::StrCat(kKoloctlPath, " --socket ", daemon_->socket_path(), " stalls"), &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "for ranks 2 (submitted: 0-1)")) << out;

  // Admin without and with a wrong token is refused.
  {
    grpc::ClientContext ctx;
    kolo::v1::AbortJobRequest req;
    req.set_job_id("job-stall");
    kolo::v1::AbortJobResponse resp;
    EXPECT_EQ(admin_->AbortJob(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    grpc::ClientContext bad;
    Authorize(&bad, "not-the-token-at-all");
    EXPECT_EQ(admin_->AbortJob(&bad, req, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  // The operator aborts the job: every rank ends with ABORTED.
  out = RunCommand(absl::StrCat(kKoloctlPath, " --socket ", daemon_->socket_path(),
                                " abort job-stall --reason 'rank 2 hung'"),
                   &code);
  EXPECT_EQ(code, 0) << out;
  auto results = ranks->Wait(absl::Seconds(20));
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "ABORTED")) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "rank 2 hung")) << r.output;
  }
}

TEST_F(OperateTest, StallTimeoutAbortsWithDeadlineExceeded) {
  StartDaemon({"--stall_warning_s=0.5", "--stall_timeout_s=1"});
  auto ranks = Ranks::Start(daemon_->socket_path(), "job-timeout", 2, {kTestRankPath, "withhold"});
  ASSERT_TRUE(ranks.ok());
  auto results = ranks->Wait(absl::Seconds(30));
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "DEADLINE_EXCEEDED")) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "stall timeout")) << r.output;
  }
  EXPECT_TRUE(daemon_->Alive()) << daemon_->Log();
}

TEST_F(OperateTest, DrainRefusesNewJobsAndLogLevelChanges) {
  StartDaemon({});
  grpc::ClientContext ctx;
  Authorize(&ctx, token_);
  kolo::v1::DrainResponse dresp;
  ASSERT_TRUE(admin_->Drain(&ctx, {}, &dresp).ok());
  EXPECT_TRUE(GetStatus().node().draining());
  auto ranks = Ranks::Start(daemon_->socket_path(), "job-late", 2, {kTestRankPath, "duplicate"});
  ASSERT_TRUE(ranks.ok());
  for (const auto& r : ranks->Wait(absl::Seconds(20))) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "draining")) << r.output;
  }

  grpc::ClientContext lctx;
  Authorize(&lctx, token_);
  kolo::v1::SetLogLevelRequest lreq;
  lreq.set_level("debug");
  kolo::v1::SetLogLevelResponse lresp;
  ASSERT_TRUE(admin_->SetLogLevel(&lctx, lreq, &lresp).ok());
  EXPECT_EQ(lresp.previous(), "info");
  EXPECT_EQ(GetStatus().node().log_level(), "debug");
  grpc::ClientContext bctx;
  Authorize(&bctx, token_);
  lreq.set_level("loud");
  EXPECT_EQ(admin_->SetLogLevel(&bctx, lreq, &lresp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// ThreadSanitizer's runtime starts a thread of its own in each process, with
// the program's name.
#if defined(__SANITIZE_THREAD__)
constexpr int kRuntimeThreads = 1;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr int kRuntimeThreads = 1;
#else
constexpr int kRuntimeThreads = 0;
#endif
#else
constexpr int kRuntimeThreads = 0;
#endif

// Every thread kolod starts carries a name (what `top -H`, a debugger or a
// scheduler trace shows an operator); only the main thread has the
// program's own.
TEST_F(OperateTest, EveryThreadOfKolodCarriesAName) {
  StartDaemon({});
  const std::string tasks = absl::StrCat("/proc/", daemon_->pid(), "/task");
  // A library thread may name itself a moment after it starts: look again
  // for a while before calling a thread unnamed.
  int seen = 0;
  std::vector<std::string> unnamed;
  WaitUntil(
      [&] {
        seen = 0;
        unnamed.clear();
        for (const auto& entry : std::filesystem::directory_iterator(tasks)) {
          const std::string tid = entry.path().filename().string();
          std::string name = ReadFile(entry.path().string() + "/comm");
          while (!name.empty() && name.back() == '\n') name.pop_back();
          ++seen;
          if (tid != std::to_string(daemon_->pid()) && name == "kolod") unnamed.push_back(tid);
        }
        return unnamed.size() <= static_cast<size_t>(kRuntimeThreads);
      },
      absl::Seconds(5), absl::Milliseconds(50));
  EXPECT_GT(seen, 5);
  EXPECT_LE(unnamed.size(), static_cast<size_t>(kRuntimeThreads))
      << "threads of kolod with no name of their own: " << absl::StrJoin(unnamed, ", ");
}

TEST_F(OperateTest, TimelineMetricsAndStatusOverTcp) {
  StartDaemon({});
  {
    grpc::ClientContext ctx;
    Authorize(&ctx, token_);
    kolo::v1::StartTimelineRequest req;
    req.set_max_events(100000);
    kolo::v1::StartTimelineResponse resp;
    ASSERT_TRUE(status_->StartTimeline(&ctx, req, &resp).ok());
  }
  auto ranks = Ranks::Start(daemon_->socket_path(), "job-traced", 2, {kTestRankPath, "broadcast"});
  ASSERT_TRUE(ranks.ok());
  for (const auto& r : ranks->Wait(absl::Seconds(60))) EXPECT_EQ(r.exit_code, 0) << r.output;

  grpc::ClientContext sctx;
  Authorize(&sctx, token_);
  kolo::v1::StopTimelineResponse trace;
  ASSERT_TRUE(status_->StopTimeline(&sctx, {}, &trace).ok());
  EXPECT_GT(trace.events(), 0u);
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(trace.trace_json(), &parsed).ok())
      << trace.trace_json().substr(0, 500);
  ASSERT_TRUE(parsed.fields().contains("traceEvents"));
  for (const char* phase : {"QUEUED", "NEGOTIATED", "FUSED", "REDUCED", "DONE"}) {
    EXPECT_TRUE(absl::StrContains(trace.trace_json(), phase)) << phase;
  }
  // Stopping twice is an error that says why.
  grpc::ClientContext s2;
  Authorize(&s2, token_);
  EXPECT_EQ(status_->StopTimeline(&s2, {}, &trace).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  // Metrics over gRPC and over HTTP.
  grpc::ClientContext mctx;
  kolo::v1::GetMetricsResponse metrics;
  ASSERT_TRUE(status_->GetMetrics(&mctx, {}, &metrics).ok());
  EXPECT_TRUE(
      absl::StrContains(metrics.text(), "kolo_collectives_total{op=\"broadcast\",dtype=\"int8\"}"));
  EXPECT_FALSE(absl::StrContains(metrics.text(),
                                 "kolo_collectives_total{op=\"broadcast\",dtype=\"int8\"} 0\n"));
  kolo::v1::GetStatusResponse status = GetStatus();
  ASSERT_GT(status.node().metrics_port(), 0);
  std::string http = HttpGet(status.node().metrics_port(), "/metrics");
  EXPECT_TRUE(absl::StartsWith(http, "HTTP/1.1 200")) << http.substr(0, 200);
  EXPECT_TRUE(absl::StrContains(http, "kolo_collective_latency_seconds_bucket")) << http;
  EXPECT_TRUE(absl::StartsWith(HttpGet(status.node().metrics_port(), "/nope"), "HTTP/1.1 404"));

  // Status over TCP, bound to loopback.
  ASSERT_TRUE(absl::StartsWith(status.node().status_address(), "127.0.0.1:"))
      << status.node().status_address();
  auto tcp = kolo::v1::Status::NewStub(
      grpc::CreateChannel(status.node().status_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext tctx;
  tctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  kolo::v1::GetStatusResponse over_tcp;
  ASSERT_TRUE(tcp->GetStatus(&tctx, {}, &over_tcp).ok());
  EXPECT_EQ(over_tcp.node().pid(), daemon_->pid());
  EXPECT_EQ(over_tcp.node().config().at("socket"), daemon_->socket_path());
}

}  // namespace
}  // namespace kolo::testing
