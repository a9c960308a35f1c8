// No caller can starve another of kolod's gRPC threads: "mallory" floods a
// real kolod with idle streams that present no credentials (server
// reflection, health Watch), hundreds at a time and reopened as fast as
// kolod ends them, while alice's job and status calls go on. Beyond her
// share each of mallory's streams is refused at once, the ones within it are
// closed at the deadline, and once she stops, kolod's threads and
// descriptors come back to where they were.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/create_channel_posix.h>
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/handoff.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/kolo/v1/status.grpc.pb.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_session.h"

namespace kolo::testing {
namespace {

constexpr uid_t kMallory = kOtherUser;
constexpr char kIdleStreamsPath[] = "tests/integration/idle_streams";
// kolod runs with this deadline for calls without credentials, and its
// default share of them (--max_anonymous_calls, --max_status_calls_per_address).
constexpr int kDeadlineS = 2;
constexpr int kShare = 16;

// A field of /proc/<pid>/status ("Threads"), or -1.
int ProcStatus(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, field + ":")) continue;
    int v = -1;
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(field.size() + 1)), &v) ? v : -1;
  }
  return -1;
}

int OpenFds(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

// One round of the attacker's report (see idle_streams.cc).
struct Round {
  int refused = 0, closed = 0, unimplemented = 0, other = 0;
  int64_t closed_min_ms = 0, closed_max_ms = 0;
};

// The idle_streams process: an attack that goes on until Stop.
class Attacker {
 public:
  // Runs `binary` against `target` as `uid` (this process's own when
  // unset).
  Attacker(const std::string& binary, std::optional<uid_t> uid, const std::string& target,
           int streams, int channels) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
    const std::string n = std::to_string(streams), c = std::to_string(channels);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      if (uid.has_value() && (setgid(*uid) != 0 || setuid(*uid) != 0)) _exit(3);
      execl(binary.c_str(), binary.c_str(), target.c_str(), n.c_str(), c.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~Attacker() {
    Stop(absl::Seconds(1));
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdout_ >= 0) close(stdout_);
  }

  // Waits for a whole line of output that starts with `prefix`.
  bool WaitForLine(const std::string& prefix, absl::Duration timeout) {
    const absl::Time end = absl::Now() + timeout;
    for (;;) {
      for (const auto& line : absl::StrSplit(output_, '\n')) {
        if (absl::StartsWith(line, prefix) &&
            output_.find('\n', line.data() - output_.data()) != std::string::npos) {
          return true;
        }
      }
      if (absl::Now() >= end || !ReadSome(end)) return false;
    }
  }

  // Ends the attack after its round in progress; true when it exited 0.
  bool Stop(absl::Duration timeout) {
    if (stdin_ >= 0) close(stdin_);
    stdin_ = -1;
    if (pid_ <= 0) return exited_ok_;
    const absl::Time end = absl::Now() + timeout;
    while (ReadSome(end)) {
    }
    int status = 0;
    if (WaitUntil([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout)) {
      exited_ok_ = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      pid_ = -1;
    }
    return exited_ok_;
  }

  bool running() const { return pid_ > 0 && kill(pid_, 0) == 0; }
  const std::string& output() const { return output_; }

  std::vector<Round> Rounds() const {
    std::vector<Round> rounds;
    for (absl::string_view line : absl::StrSplit(output_, '\n')) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      Round r;
      if (f.size() != 13 || f[0] != "round" || !absl::SimpleAtoi(f[3], &r.refused) ||
          !absl::SimpleAtoi(f[5], &r.closed) || !absl::SimpleAtoi(f[7], &r.unimplemented) ||
          !absl::SimpleAtoi(f[9], &r.other) || !absl::SimpleAtoi(f[11], &r.closed_min_ms) ||
          !absl::SimpleAtoi(f[12], &r.closed_max_ms)) {
        continue;
      }
      rounds.push_back(r);
    }
    return rounds;
  }

 private:
  // Reads what there is by `end`; false at the end of the output or the
  // deadline.
  bool ReadSome(absl::Time end) {
    if (stdout_ < 0) return false;
    pollfd p{stdout_, POLLIN, 0};
    const int ms =
        static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(end - absl::Now())));
    if (poll(&p, 1, ms) <= 0) return false;
    char buf[4096];
    const ssize_t got = read(stdout_, buf, sizeof(buf));
    if (got <= 0) return false;
    output_.append(buf, got);
    return true;
  }

  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  bool exited_ok_ = false;
  std::string output_;
};

// The attacker's binary where `uid` may run it: the runfiles tree lies
// under a home directory other users cannot enter.
std::string RunnableCopy(const std::string& dir) {
  const std::string copy = dir + "/idle_streams";
  std::filesystem::copy_file(kIdleStreamsPath, copy,
                             std::filesystem::copy_options::overwrite_existing);
  chmod(copy.c_str(), 0755);
  return copy;
}

// Every round: the streams beyond the share (of those that wait, half of
// them) were refused, at most the share was let in, and those let in were
// closed at the deadline.
void ExpectSharesHeld(const std::vector<Round>& rounds, int streams, const std::string& output) {
  ASSERT_FALSE(rounds.empty()) << output;
  for (const Round& r : rounds) {
    EXPECT_GE(r.refused, streams / 2 - kShare) << output;
    EXPECT_LE(r.closed, kShare) << output;
    EXPECT_GE(r.closed, 1) << output;
    EXPECT_EQ(r.other, 0) << output;
    EXPECT_GE(r.closed_min_ms, kDeadlineS * 1000 - 100) << output;
    EXPECT_LE(r.closed_max_ms, kDeadlineS * 1000 + 5000) << output;
  }
}

// Warms gRPC's own pools in kolod (its executor and timer threads grow on
// first use, to a bound) with one short round of idle streams, so that what
// is left after a flood can be told from what the pools keep.
void WarmUp(const std::string& binary, const std::string& target) {
  Attacker warm(binary, std::nullopt, target, 2 * kShare, 2);
  EXPECT_TRUE(warm.Stop(absl::Seconds(30))) << warm.output();
}

// kolod's threads and descriptors come back to about `threads` and `fds`.
void ExpectBackToIdle(pid_t pid, int threads, int fds) {
  const bool back = WaitUntil(
      [&] { return ProcStatus(pid, "Threads") <= threads + 4 && OpenFds(pid) <= fds + 4; },
      absl::Seconds(20), absl::Milliseconds(50));
  EXPECT_TRUE(back) << "kolod holds " << ProcStatus(pid, "Threads") << " threads (" << threads
                    << " before) and " << OpenFds(pid) << " descriptors (" << fds << " before)";
}

std::string StatusAddress(const std::shared_ptr<grpc::Channel>& unix_channel) {
  auto stub = kolo::v1::Status::NewStub(unix_channel);
  grpc::ClientContext ctx;
  kolo::v1::GetStatusResponse r;
  grpc::Status s = stub->GetStatus(&ctx, {}, &r);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return r.node().status_address();
}

// A channel to `address` (127.0.0.1:PORT) whose connection comes from
// `source` (another loopback address).
std::shared_ptr<grpc::Channel> ChannelFrom(const std::string& source, const std::string& address) {
  const std::string port = address.substr(address.rfind(':') + 1);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  inet_pton(AF_INET, source.c_str(), &src.sin_addr);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(std::stoi(port)));
  inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)), 0) << strerror(errno);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)), 0) << strerror(errno);
  return grpc::CreateInsecureChannelFromFd(address, fd);
}

grpc::Status GetStatus(const std::shared_ptr<grpc::Channel>& channel, const std::string& key,
                       const std::string& value, kolo::v1::GetStatusResponse* r) {
  auto stub = kolo::v1::Status::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!key.empty()) ctx.AddMetadata(key, value);
  return stub->GetStatus(&ctx, {}, r);
}

std::string AdminToken(const std::string& dir) {
  std::ifstream in(dir + "/admin.token");
  std::string token;
  in >> token;
  return token;
}

TEST(CallSharesTest, IdleStreamsOfOneUserDoNotStarveAnothersJob) {
  if (!CanBecomeAnotherUser()) GTEST_SKIP() << "needs root to run mallory as another user";
  const std::string dir = MakeTempDir();
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  auto daemon = DaemonProcess::Start(
      dir + "/kolod.sock",
      {"--socket_mode=0666", absl::StrCat("--anonymous_call_deadline_s=", kDeadlineS)});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ExpectDaemonServesAJob(*daemon, "warm-up");
  const std::string binary = RunnableCopy(dir);
  WarmUp(binary, "unix:" + daemon->socket_path());
  const int threads = ProcStatus(daemon->pid(), "Threads");
  const int fds = OpenFds(daemon->pid());

  constexpr int kStreams = 300;
  Attacker mallory(binary, kMallory, "unix:" + daemon->socket_path(), kStreams, 3);
  ASSERT_TRUE(mallory.WaitForLine("open", absl::Seconds(20))) << mallory.output();
  // While mallory's streams are open: alice's two-rank job and her status
  // calls (with her identity ticket, and without any).
  const absl::Time job_start = absl::Now();
  auto ranks = Ranks::Start(daemon->socket_path(), "alice-job", 2, {kTestRankPath, "duplicate"});
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  for (const auto& r : ranks->Wait(absl::Seconds(45))) EXPECT_EQ(r.exit_code, 0) << r.output;
  std::cerr << "alice's job ran in " << absl::Now() - job_start << " beside mallory's streams\n";
  auto channel =
      grpc::CreateChannel("unix:" + daemon->socket_path(), grpc::InsecureChannelCredentials());
  kolo::v1::GetStatusResponse status;
  grpc::Status s =
      GetStatus(channel, kHandoffMetadata, IdentityTicket(daemon->socket_path()), &status);
  EXPECT_TRUE(s.ok()) << s.error_message();
  s = GetStatus(channel, "", "", &status);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // The attack went on throughout.
  EXPECT_TRUE(mallory.running()) << mallory.output();
  ASSERT_TRUE(mallory.WaitForLine("round 2 ", absl::Seconds(30))) << mallory.output();
  ASSERT_TRUE(mallory.Stop(absl::Seconds(30))) << mallory.output();
  ExpectSharesHeld(mallory.Rounds(), kStreams, mallory.output());
  std::cerr << mallory.output();
  ExpectBackToIdle(daemon->pid(), threads, fds);
  ExpectDaemonServesAJob(*daemon);
}

TEST(CallSharesTest, OneAddressOnTheStatusPortDoesNotStarveAnother) {
  const std::string dir = MakeTempDir();
  auto daemon = DaemonProcess::Start(dir + "/kolod.sock",
                                     {absl::StrCat("--anonymous_call_deadline_s=", kDeadlineS)});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto unix_channel =
      grpc::CreateChannel("unix:" + daemon->socket_path(), grpc::InsecureChannelCredentials());
  const std::string address = StatusAddress(unix_channel);
  ASSERT_TRUE(absl::StartsWith(address, "127.0.0.1:")) << address;
  const std::string token = AdminToken(dir);
  ASSERT_FALSE(token.empty());
  auto from_one = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  kolo::v1::GetStatusResponse r;
  ASSERT_TRUE(GetStatus(from_one, "", "", &r).ok());
  WarmUp(kIdleStreamsPath, address);
  const int threads = ProcStatus(daemon->pid(), "Threads");
  const int fds = OpenFds(daemon->pid());

  constexpr int kStreams = 200;
  // Fewer streams on each connection than kolod lets one connection carry
  // at once (the share), so that all of them reach kolod together.
  Attacker flood(kIdleStreamsPath, std::nullopt, address, kStreams, 14);
  ASSERT_TRUE(flood.WaitForLine("open", absl::Seconds(20))) << flood.output();
  // 127.0.0.1 holds its share: its next call without the token is refused,
  // naming the share...
  grpc::Status refused;
  EXPECT_TRUE(WaitUntil(
      [&] {
        refused = GetStatus(from_one, "", "", &r);
        return refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
      },
      absl::Seconds(10), absl::Milliseconds(20)))
      << refused.error_message();
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "--max_status_calls_per_address"))
      << refused.error_message();
  // ... while the admin token from the same address, and another address,
  // are answered.
  grpc::Status admin = GetStatus(from_one, "authorization", "Bearer " + token, &r);
  EXPECT_TRUE(admin.ok()) << admin.error_message();
  auto from_two = ChannelFrom("127.0.0.2", address);
  grpc::Status other = GetStatus(from_two, "", "", &r);
  EXPECT_TRUE(other.ok()) << other.error_message();
  EXPECT_FALSE(r.node().version().empty());
  {
    auto health = grpc::health::v1::Health::NewStub(from_two);
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckResponse h;
    ASSERT_TRUE(health->Check(&ctx, {}, &h).ok());
    EXPECT_EQ(h.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  EXPECT_TRUE(flood.running()) << flood.output();
  ASSERT_TRUE(flood.Stop(absl::Seconds(30))) << flood.output();
  ExpectSharesHeld(flood.Rounds(), kStreams, flood.output());
  std::cerr << flood.output();
  from_two.reset();
  ExpectBackToIdle(daemon->pid(), threads, fds);
  // Once the flood is over, 127.0.0.1 is served again.
  EXPECT_TRUE(GetStatus(from_one, "", "", &r).ok());
}

}  // namespace
}  // namespace kolo::testing
