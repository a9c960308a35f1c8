// kolod shared between users: each attack one user could try against the
// daemon or another user's job gets a clear error for the offender, and the
// daemon serves a normal two-rank job afterwards.
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/fd_passing.h"
#include "common/handoff.h"
#include "common/shared_segment.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "proto/kolo/v1/node.grpc.pb.h"
#include "proto/kolo/v1/status.grpc.pb.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_session.h"

namespace kolo::testing {
namespace {

constexpr uid_t kNobody = kOtherUser;

// kolod's resident memory in bytes (VmRSS), or 0.
uint64_t ResidentBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "VmRSS:")) {
      std::string kb(absl::StripAsciiWhitespace(line.substr(6)));
      kb = kb.substr(0, kb.find(' '));
      uint64_t value = 0;
      return absl::SimpleAtoi(kb, &value) ? value * 1024 : 0;
    }
  }
  return 0;
}

class SharedNodeTest : public ::testing::Test {
 protected:
  void StartDaemon(std::vector<std::string> args = {}) {
    dir_ = MakeTempDir();
    auto d = DaemonProcess::Start(dir_ + "/kolod.sock", std::move(args));
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_.emplace(std::move(*d));
    channel_ =
        grpc::CreateChannel("unix:" + daemon_->socket_path(), grpc::InsecureChannelCredentials());
  }

  std::unique_ptr<RawSession> Attach(RawAttachOptions options, kolo::v1::DaemonMessage* reply,
                                     bool* ok) {
    return RawAttach(channel_, daemon_->socket_path(), options, reply, ok);
  }

  void ExpectRefused(const RawAttachOptions& options, grpc::StatusCode code,
                     const std::string& text) {
    ExpectAttachRefused(channel_, daemon_->socket_path(), options, code, text);
  }

  void ExpectDaemonServesAJob() { kolo::testing::ExpectDaemonServesAJob(*daemon_); }

  // Attaches rank 0 of a two-rank job `job_id` whose rank 1 never comes, so
  // the job stays (and a name submitted to it waits).
  std::unique_ptr<RawSession> HoldHalfAJob(const std::string& job_id) {
    RawAttachOptions options;
    options.job_id = job_id;
    options.size = 2;
    kolo::v1::DaemonMessage reply;
    bool ok = false;
    auto held = Attach(options, &reply, &ok);
    EXPECT_TRUE(ok) << job_id;
    return ok ? std::move(held) : nullptr;
  }

  std::string dir_;
  std::optional<DaemonProcess> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
};

// The segment another user created cannot be attached: kolod takes the
// descriptor from the kernel, and it must belong to the caller's uid. (A
// process can no longer name another's pid and fd: those fields are gone.)
TEST_F(SharedNodeTest, AnotherUsersSegmentIsRefused) {
  if (!CanBecomeAnotherUser()) GTEST_SKIP() << "needs root to make a segment as another user";
  StartDaemon();
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // As another user: make a segment and give it away.
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(3);
    auto seg = SharedSegment::Create(1 << 16);
    if (!seg.ok() || !SendWithFd(pair[1], "segment", seg->fd()).ok()) _exit(4);
    _exit(0);
  }
  close(pair[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto got = ReceiveWithFd(pair[0], 64);
  close(pair[0]);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->fd.valid());
  auto ticket =
      HandOff(HandoffSocketPath(daemon_->socket_path()), got->fd.get(), absl::Seconds(10));
  EXPECT_EQ(ticket.status().code(), absl::StatusCode::kPermissionDenied) << ticket.status();
  EXPECT_TRUE(absl::StrContains(ticket.status().message(), "attaching user"))
      << ticket.status().message();
  ExpectDaemonServesAJob();
}

// Jobs are keyed by (uid, job id): another user's job of the same id, with
// another token, is a different job; it neither blocks nor joins this one.
TEST_F(SharedNodeTest, AnotherUsersJobOfTheSameIdIsSeparate) {
  if (!CanBecomeAnotherUser()) GTEST_SKIP() << "needs root to run a rank as another user";
  StartDaemon({"--socket_mode=0666"});
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  // Root holds rank 0 of "shared-id" with a pending name.
  auto held = HoldHalfAJob("shared-id");
  ASSERT_NE(held, nullptr);
  held->Push(AllreduceSlot(1, "grad/held"));
  // Another user runs a whole job named "shared-id" with its own token.
  const std::string log_dir = MakeTempDir();
  ASSERT_EQ(chmod(log_dir.c_str(), 0777), 0);
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string log = absl::StrCat(log_dir, "/rank", r, ".log");
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
      dup2(fd, 1);
      dup2(fd, 2);
      setenv("KOLO_SOCKET", daemon_->socket_path().c_str(), 1);
      setenv("KOLO_JOB_ID", "shared-id", 1);
      setenv("KOLO_JOB_TOKEN", "fedcba9876543210fedcba9876543210", 1);
      setenv("KOLO_RANK", std::to_string(r).c_str(), 1);
      setenv("KOLO_SIZE", "2", 1);
      execl("/usr/bin/setpriv", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            kTestRankPath, "duplicate", static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  for (size_t r = 0; r < pids.size(); ++r) {
    int status = 0;
    ASSERT_EQ(waitpid(pids[r], &status, 0), pids[r]);
    std::ifstream in(absl::StrCat(log_dir, "/rank", r, ".log"));
    std::stringstream out;
    out << in.rdbuf();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out.str();
  }
  // Root's job is untouched: still attached, its name still pending.
  abi::v1::CompletionSlot none = held->PopCompletion(absl::Now());
  EXPECT_EQ(none.request_id, 0u);
  ExpectDaemonServesAJob();
}

TEST_F(SharedNodeTest, JobOfAMillionRanksIsRefused) {
  StartDaemon();
  RawAttachOptions huge;
  huge.job_id = "huge";
  huge.size = 1 << 20;
  ExpectRefused(huge, grpc::StatusCode::INVALID_ARGUMENT, "max_job_ranks");
  // A multi-node layout of many ranks with one local rank per node is
  // bounded the same way; a one-node job cannot claim more local ranks than
  // one user may attach.
  RawAttachOptions wide;
  wide.job_id = "wide";
  wide.size = 4096;
  ExpectRefused(wide, grpc::StatusCode::INVALID_ARGUMENT, "local size 4096");
  ExpectDaemonServesAJob();
}

// One rank submits a flood of names no other rank ever submits: beyond the
// per-rank bound each is refused at once, and kolod's memory stays flat.
TEST_F(SharedNodeTest, FloodOfNamesIsBounded) {
  StartDaemon({"--max_pending_per_rank=64"});
  RawAttachOptions options;
  options.job_id = "flood";
  options.size = 200;  // only rank 0 ever attaches
  kolo::v1::DaemonMessage reply;
  bool ok = false;
  auto s = Attach(options, &reply, &ok);
  ASSERT_TRUE(ok);
  const uint64_t before = ResidentBytes(daemon_->pid());
  constexpr int kNames = 3000;
  int exhausted = 0, other = 0, completions = 0;
  auto drain = [&](absl::Time deadline) {
    for (;;) {
      abi::v1::CompletionSlot c = s->PopCompletion(deadline);
      if (c.request_id == 0) return;
      ++completions;
      if (c.code == static_cast<int>(absl::StatusCode::kResourceExhausted)) {
        ++exhausted;
      } else {
        ++other;
      }
    }
  };
  for (int i = 0; i < kNames; ++i) {
    // Like a real client, keep the completions that can still come (all but
    // the 64 names that wait forever) within the completion ring.
    const absl::Time room_by = absl::Now() + absl::Seconds(20);
    while (i - 64 - completions >= static_cast<int>(kRawCompletionCap) - 1 &&
           absl::Now() < room_by) {
      drain(absl::Now() + absl::Milliseconds(10));
    }
    ASSERT_TRUE(s->PushWhenRoom(AllreduceSlot(i + 1, absl::StrCat("flood/", i)),
                                absl::Now() + absl::Seconds(20)))
        << "kolod stopped draining the ring at name " << i;
    drain(absl::Now());
  }
  const absl::Time end = absl::Now() + absl::Seconds(20);
  while (exhausted + other < kNames - 64 && absl::Now() < end)
    drain(absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(exhausted, kNames - 64);
  EXPECT_EQ(other, 0);
  const uint64_t after = ResidentBytes(daemon_->pid());
  std::cerr << "kolod resident memory: " << before / 1024 << " KiB before, " << after / 1024
            << " KiB after " << kNames << " names\n";
  EXPECT_LT(after, before + (uint64_t{32} << 20));
  s.reset();
  ExpectDaemonServesAJob();
}

// Thousands of Attach streams that never send their request: without a
// handoff ticket each is refused at once; with tickets (the caller's own
// handoffs) at most a few per user wait, each until the attach deadline.
// Either way each offender gets an error and kolod serves a job afterwards.
TEST_F(SharedNodeTest, IdleAttachStreamsAreCutOff) {
  StartDaemon({"--attach_timeout_s=2"});
  using Stream = grpc::ClientReaderWriter<kolo::v1::ClientMessage, kolo::v1::DaemonMessage>;
  auto stub = kolo::v1::Node::NewStub(channel_);
  // Opens `n` streams (with a fresh ticket each when `ticketed`) and
  // returns how many kolod ended with an error before their own deadline.
  auto flood = [&](int n, bool ticketed) {
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    std::vector<std::unique_ptr<Stream>> streams;
    std::vector<SharedSegment> segments;
    for (int i = 0; i < n; ++i) {
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      if (ticketed) {
        segments.push_back(*SharedSegment::Create(1 << 16));
        auto ticket = HandOff(HandoffSocketPath(daemon_->socket_path()), segments.back().fd(),
                              absl::Seconds(10));
        EXPECT_TRUE(ticket.ok()) << ticket.status();
        if (ticket.ok()) contexts.back()->AddMetadata(kHandoffMetadata, *ticket);
      }
      streams.push_back(stub->Attach(contexts.back().get()));
    }
    int ended = 0;
    for (auto& stream : streams) {
      kolo::v1::DaemonMessage m;
      while (stream->Read(&m)) {
      }
      grpc::Status st = stream->Finish();
      if (!st.ok() && st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) ++ended;
    }
    return ended;
  };
  const absl::Time start = absl::Now();
  EXPECT_EQ(flood(2000, /*ticketed=*/false), 2000);
  EXPECT_EQ(flood(100, /*ticketed=*/true), 100);
  std::cerr << "2100 idle Attach streams ended in " << absl::Now() - start << "\n";
  ExpectDaemonServesAJob();
}

// A terminal or a FIFO handed over as the segment is refused without kolod
// opening, blocking on, or acquiring it; a hang-up does not stop kolod.
TEST_F(SharedNodeTest, PtyAndFifoAreRefusedAndHangupIsIgnored) {
  StartDaemon();
  const std::string handoff = HandoffSocketPath(daemon_->socket_path());
  int master = -1, slave = -1;
  ASSERT_EQ(openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  auto tty = HandOff(handoff, slave, absl::Seconds(10));
  EXPECT_EQ(tty.status().code(), absl::StatusCode::kInvalidArgument) << tty.status();
  EXPECT_TRUE(absl::StrContains(tty.status().message(), "memfd")) << tty.status();
  close(slave);
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  int fifo_fd = open(fifo.c_str(), O_RDWR | O_NONBLOCK);
  ASSERT_GE(fifo_fd, 0);
  auto pipe_handoff = HandOff(handoff, fifo_fd, absl::Seconds(10));
  EXPECT_EQ(pipe_handoff.status().code(), absl::StatusCode::kInvalidArgument)
      << pipe_handoff.status();
  close(fifo_fd);
  close(master);  // the terminal hangs up
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  EXPECT_TRUE(StaysFalse([&] { return !daemon_->Alive(); }, absl::Milliseconds(200)))
      << daemon_->Log();
  ExpectDaemonServesAJob();
}

// Over TCP, Status shows node facts only unless the call carries the admin
// token; identity tickets are not accepted there; timelines need the token
// and a bounded size.
TEST_F(SharedNodeTest, StatusOverTcpNeedsTheAdminToken) {
  StartDaemon();
  auto held = HoldHalfAJob("private-job");
  ASSERT_NE(held, nullptr);
  auto unix_stub = kolo::v1::Status::NewStub(channel_);
  kolo::v1::GetStatusResponse facts;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(unix_stub->GetStatus(&ctx, {}, &facts).ok());
    EXPECT_EQ(facts.jobs_size(), 0) << "no identity, no jobs";
  }
  ASSERT_FALSE(facts.node().status_address().empty());
  auto tcp = kolo::v1::Status::NewStub(
      grpc::CreateChannel(facts.node().status_address(), grpc::InsecureChannelCredentials()));
  std::ifstream token_in(dir_ + "/admin.token");
  std::string admin_token;
  token_in >> admin_token;
  ASSERT_FALSE(admin_token.empty());
  {
    grpc::ClientContext ctx;
    kolo::v1::GetStatusResponse r;
    ASSERT_TRUE(tcp->GetStatus(&ctx, {}, &r).ok());
    EXPECT_EQ(r.jobs_size(), 0) << r.DebugString();
    EXPECT_FALSE(r.node().version().empty());
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + admin_token);
    kolo::v1::GetStatusResponse r;
    ASSERT_TRUE(tcp->GetStatus(&ctx, {}, &r).ok());
    ASSERT_EQ(r.jobs_size(), 1);
    EXPECT_EQ(r.jobs(0).job_id(), "private-job");
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer wrong");
    kolo::v1::GetStatusResponse r;
    EXPECT_EQ(tcp->GetStatus(&ctx, {}, &r).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("kolo-handoff", IdentityTicket(daemon_->socket_path()));
    kolo::v1::GetStatusResponse r;
    EXPECT_EQ(tcp->GetStatus(&ctx, {}, &r).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext ctx;
    kolo::v1::JobDetail r;
    kolo::v1::GetJobRequest req;
    req.set_job_id("private-job");
    EXPECT_EQ(tcp->GetJob(&ctx, req, &r).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    kolo::v1::StartTimelineRequest req;
    kolo::v1::StartTimelineResponse r;
    EXPECT_EQ(tcp->StartTimeline(&ctx, req, &r).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + admin_token);
    kolo::v1::StartTimelineRequest req;
    req.set_max_events(uint64_t{1} << 40);
    kolo::v1::StartTimelineResponse r;
    EXPECT_EQ(tcp->StartTimeline(&ctx, req, &r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  held.reset();
  ExpectDaemonServesAJob();
}

}  // namespace
}  // namespace kolo::testing
