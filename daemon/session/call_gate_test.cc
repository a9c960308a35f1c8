// CallGate and UnixListener through a real gRPC server: the server serves
// only the connections the listener hands it, as kolod's socket does.
#include "daemon/session/call_gate.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include <grpcpp/grpcpp.h>
#include <grpcpp/server_posix.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/short_temp_dir.h"
#include "common/testing/wait_until.h"
#include "daemon/session/unix_listener.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace kolo::daemon {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// A Watch that stays open until its call ends, as an idle stream does.
class IdleWatchService final : public grpc::health::v1::Health::Service {
 public:
  grpc::Status Watch(grpc::ServerContext* context, const HealthCheckRequest* /*request*/,
                     grpc::ServerWriter<HealthCheckResponse>* writer) override {
    HealthCheckResponse serving;
    serving.set_status(HealthCheckResponse::SERVING);
    writer->Write(serving);
    while (!context->IsCancelled()) absl::SleepFor(absl::Milliseconds(2));
    return grpc::Status::OK;
  }
};

// One client Watch stream, read to its end on a thread of its own.
class OpenWatch {
 public:
  OpenWatch(grpc::health::v1::Health::Stub* stub, bool credentials) {
    if (credentials) context_.AddMetadata("x-test-credentials", "yes");
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    reader_ = stub->Watch(&context_, HealthCheckRequest());
    thread_ = std::thread([this] {
      HealthCheckResponse r;
      while (reader_->Read(&r)) {
      }
      status_ = reader_->Finish();
      ended_at_ = absl::Now();
      done_.Notify();
    });
  }
  ~OpenWatch() {
    context_.TryCancel();
    thread_.join();
  }
  bool ended() const { return done_.HasBeenNotified(); }
  const grpc::Status& status() const { return status_; }  // once ended
  absl::Time ended_at() const { return ended_at_; }
  void Cancel() { context_.TryCancel(); }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader_;
  std::thread thread_;
  grpc::Status status_;
  absl::Time ended_at_;
  absl::Notification done_;
};

class CallGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CallGateOptions options;
    options.where = "the test socket";
    options.calls = ShareLimits{4, 100};
    options.calls_knob = "--max_calls";
    options.anonymous_calls = ShareLimits{2, 100};
    options.anonymous_knob = "--max_anonymous_calls";
    options.anonymous_deadline = absl::Milliseconds(500);
    options.presented = [this](const CallStart& call) {
      last_uid_ = call.peer_uid.value_or(-1);
      return call.metadata->count("x-test-credentials") > 0 ? Presented::kTicket
                                                            : Presented::kNothing;
    };
    gate_ = std::make_unique<CallGate>(std::move(options));
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> gates;
    gates.push_back(gate_->Factory());
    builder.experimental().SetInterceptorCreators(std::move(gates));
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    path_ = MakeShortTempDir("kolo-gate") + "/s.sock";
    auto listener =
        UnixListener::Start(UnixListenerOptions{path_, ShareLimits{8, 16}, "--max_connections"},
                            [server = server_.get()](UniqueFd fd) {
                              grpc::AddInsecureChannelFromFd(server, fd.Release());
                            });
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = std::move(*listener);
    stub_ = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel("unix:" + path_, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    listener_.reset();
    server_->Shutdown(std::chrono::system_clock::now());
  }

  const std::string me_ = UidIdentity(getuid());
  IdleWatchService service_;
  std::unique_ptr<CallGate> gate_;
  std::unique_ptr<grpc::Server> server_;
  std::string path_;
  std::unique_ptr<UnixListener> listener_;
  std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
  std::atomic<int> last_uid_{-2};
};

TEST(CallerOfTest, NamesTheUidOrTheSourceAddress) {
  std::optional<uid_t> uid;
  EXPECT_EQ(CallerOf("ipv4:127.0.0.1:5000", &uid), "ipv4:127.0.0.1");
  EXPECT_EQ(CallerOf("ipv6:[::1]:80", &uid), "ipv6:[::1]");
  EXPECT_EQ(CallerOf("unix:/run/x.sock", &uid), "unix:/run/x.sock");
  EXPECT_FALSE(uid.has_value());
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  EXPECT_EQ(CallerOf(absl::StrCat("fd:", pair[0]), &uid), UidIdentity(getuid()));
  EXPECT_EQ(uid, getuid());
  close(pair[0]);
  close(pair[1]);
}

TEST_F(CallGateTest, CallsWithoutCredentialsAreBoundedAndClosedAfterTheDeadline) {
  const absl::Time start = absl::Now();
  OpenWatch a(stub_.get(), false), b(stub_.get(), false);
  ASSERT_TRUE(WaitUntil([&] { return gate_->anonymous_calls_held(me_) == 2; }, absl::Seconds(10)));
  EXPECT_EQ(last_uid_.load(), static_cast<int>(getuid()));
  OpenWatch over(stub_.get(), false);
  ASSERT_TRUE(WaitUntil([&] { return over.ended(); }, absl::Seconds(10)));
  EXPECT_EQ(over.status().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(over.status().error_message(), "--max_anonymous_calls=2"))
      << over.status().error_message();
  EXPECT_TRUE(absl::StrContains(over.status().error_message(), me_))
      << over.status().error_message();
  // The two within the share end at their deadline, saying why.
  ASSERT_TRUE(WaitUntil([&] { return a.ended() && b.ended(); }, absl::Seconds(10)));
  for (const OpenWatch* w : {&a, &b}) {
    EXPECT_EQ(w->status().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_TRUE(absl::StrContains(w->status().error_message(), "presented no credentials"))
        << w->status().error_message();
    EXPECT_GE(w->ended_at() - start, absl::Milliseconds(450));
  }
  ASSERT_TRUE(WaitUntil([&] { return gate_->calls_held(me_) == 0; }, absl::Seconds(10)));
  EXPECT_EQ(gate_->anonymous_calls_held(me_), 0);
}

TEST_F(CallGateTest, CallsWithCredentialsStayOpenWithinTheirShare) {
  std::vector<std::unique_ptr<OpenWatch>> held;
  for (int i = 0; i < 4; ++i) held.push_back(std::make_unique<OpenWatch>(stub_.get(), true));
  ASSERT_TRUE(WaitUntil([&] { return gate_->calls_held(me_) == 4; }, absl::Seconds(10)));
  OpenWatch over(stub_.get(), true);
  ASSERT_TRUE(WaitUntil([&] { return over.ended(); }, absl::Seconds(10)));
  EXPECT_EQ(over.status().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(over.status().error_message(), "--max_calls=4"))
      << over.status().error_message();
  // Past the anonymous deadline the credentialed calls are still open.
  EXPECT_TRUE(StaysFalse(
      [&] {
        for (const auto& w : held) {
          if (w->ended()) return true;
        }
        return false;
      },
      absl::Milliseconds(800)));
  // A call that ends gives its share back.
  held[0]->Cancel();
  ASSERT_TRUE(WaitUntil([&] { return gate_->calls_held(me_) == 3; }, absl::Seconds(10)));
  held.clear();
  ASSERT_TRUE(WaitUntil([&] { return gate_->calls_held(me_) == 0; }, absl::Seconds(10)));
}

// Connects a raw socket to `path`; -1 on failure.
int Connect(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the peer closed `fd` (a read sees the end) within `timeout`.
bool ClosedByPeer(int fd, absl::Duration timeout) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) return false;
  char c;
  return read(fd, &c, 1) == 0;
}

TEST(UnixListenerTest, EachUidHoldsItsShareOfConnections) {
  const std::string path = MakeShortTempDir("kolo-listen") + "/s.sock";
  absl::Mutex mu;
  std::vector<UniqueFd> served;
  auto listener = UnixListener::Start(
      UnixListenerOptions{path, ShareLimits{2, 10}, "--max_connections"}, [&](UniqueFd fd) {
        absl::MutexLock l(&mu);
        served.push_back(std::move(fd));
      });
  ASSERT_TRUE(listener.ok()) << listener.status();
  auto served_count = [&] {
    absl::MutexLock l(&mu);
    return static_cast<int>(served.size());
  };
  const int a = Connect(path), b = Connect(path);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_TRUE(WaitUntil([&] { return served_count() == 2; }, absl::Seconds(10)));
  EXPECT_EQ((*listener)->connections_of(getuid()), 2);
  // The third is over the share: closed at once, never served.
  const int c = Connect(path);
  ASSERT_GE(c, 0);
  EXPECT_TRUE(ClosedByPeer(c, absl::Seconds(10)));
  EXPECT_EQ(served_count(), 2);
  // The server closes one connection: its share comes back.
  {
    absl::MutexLock l(&mu);
    served[0].Reset();
  }
  const int d = Connect(path);
  ASSERT_GE(d, 0);
  ASSERT_TRUE(WaitUntil([&] { return served_count() == 3; }, absl::Seconds(10)));
  EXPECT_EQ((*listener)->connections_of(getuid()), 2);
  for (int fd : {a, b, c, d}) close(fd);
}

}  // namespace
}  // namespace kolo::daemon
