// No peer can starve another on a real kolod's Peer port: two kolods (nodes
// a and b, mutual TLS on loopback) run a legitimate two-node job, one rank
// each, while "mallory", a raw gRPC client of node a's Peer service with a
// certificate of the cluster's CA, attacks it:
//   (a) streams whose first message is several MB, without the job's token:
//       each is refused unread (UNAUTHENTICATED, then RESOURCE_EXHAUSTED once
//       mallory's failure budget is spent), and kolod's peak RSS grows by
//       far less than what was sent;
//   (b) Hellos for jobs that do not exist, with node b's own certificate:
//       the share of held ones fills, more are refused, the held ones are
//       answered NOT_FOUND within the unknown-job wait, and node b's job
//       joins all the same;
//   (c) Hellos with a wrong token, again and again: mallory is cut off by
//       its failure budget while the job goes on.
// Afterwards kolod's threads and open files are back near their idle count.
#include <dirent.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "proto/kolo/v1/peer.grpc.pb.h"
#include "proto/kolo/v1/status.grpc.pb.h"
#include "tests/integration/harness.h"

namespace kolo::testing {
namespace {

using PeerStream = grpc::ClientReaderWriter<kolo::v1::MemberMessage, kolo::v1::CoordinatorMessage>;

// The legitimate job's scenario: every dtype and op across the nodes.
constexpr char kScenario[] = "matrix";
constexpr absl::Duration kJobTimeout = absl::Seconds(50);
constexpr char kWrongToken[] = "wrong-wrong-wrong-wrong-wrong-wr";

std::string PeerAddressOf(const DaemonProcess& d) {
  auto stub = kolo::v1::Status::NewStub(
      grpc::CreateChannel("unix:" + d.socket_path(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  kolo::v1::GetStatusResponse resp;
  if (!stub->GetStatus(&ctx, {}, &resp).ok()) return "";
  auto it = resp.node().config().find("peer_address");
  return it == resp.node().config().end() ? "" : it->second;
}

// A field of /proc/PID/status in its unit (kB for memory), or -1.
int64_t ProcStatus(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, field + ":")) continue;
    std::string value = line.substr(field.size() + 1);
    const size_t unit = value.find(" kB");
    if (unit != std::string::npos) value.resize(unit);
    int64_t n = -1;
    return absl::SimpleAtoi(value, &n) ? n : -1;
  }
  return -1;
}

int OpenFiles(pid_t pid) {
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (dir == nullptr) return -1;
  int n = 0;
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n - 2;  // . and ..
}

kolo::v1::MemberMessage Hello(const std::string& job, const std::string& token) {
  kolo::v1::MemberMessage m;
  kolo::v1::Hello* h = m.mutable_hello();
  h->set_job_id(job);
  h->set_job_token(token);
  h->set_node("mallory");
  h->set_size(2);
  h->add_ranks(1);
  h->set_ucx_address("nowhere");
  return m;
}

// One raw stream of mallory's.
struct RawStream {
  grpc::ClientContext context;
  std::unique_ptr<PeerStream> stream;
};

class PeerSharesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("UCX_TLS", "tcp", 1);
    for (const char* name : {"a", "b"}) {
      std::vector<std::string> args = PeerTlsFlags(name);
      args.push_back(absl::StrCat("--node_name=node-", name));
      auto d = DaemonProcess::Start(MakeTempDir() + "/kolod.sock", args);
      ASSERT_TRUE(d.ok()) << d.status();
      daemons_.push_back(std::make_unique<DaemonProcess>(std::move(*d)));
    }
    coordinator_ = PeerAddressOf(*daemons_[0]);
    ASSERT_FALSE(coordinator_.empty());
    idle_threads_ = ProcStatus(daemons_[0]->pid(), "Threads");
    idle_files_ = OpenFiles(daemons_[0]->pid());
  }

  // Mallory's channel to node a's Peer port, with certificate `name`.
  std::shared_ptr<grpc::Channel> Mallory(const std::string& name) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = ReadFile(absl::StrCat(kTestCertDir, "/ca.pem"));
    tls.pem_cert_chain = ReadFile(absl::StrCat(kTestCertDir, "/", name, ".pem"));
    tls.pem_private_key = ReadFile(absl::StrCat(kTestCertDir, "/", name, ".key"));
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(64 << 20);
    return grpc::CreateCustomChannel(coordinator_, grpc::SslCredentials(tls), args);
  }

  // A stream that names `job` and `token` in its metadata, as a member's
  // does (none when `job` is empty); the keys are daemon/wire/peer_protocol.h's.
  std::unique_ptr<RawStream> Open(kolo::v1::Peer::Stub* stub, absl::Duration deadline,
                                  const std::string& job, const std::string& token) {
    auto s = std::make_unique<RawStream>();
    s->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    if (!job.empty()) {
      s->context.AddMetadata("kolo-job-id-bin", job);
      s->context.AddMetadata("kolo-job-token-bin", token);
    }
    s->stream = stub->Negotiate(&s->context);
    return s;
  }

  // The legitimate job: rank 0 on node a, rank 1 on node b.
  std::vector<Ranks> StartJob(const std::string& job) {
    std::vector<Ranks> out;
    for (int n = 0; n < 2; ++n) {
      auto r = Ranks::StartOnNode(daemons_[n]->socket_path(), job, 2, n, 1, coordinator_,
                                  {kTestRankPath, kScenario});
      EXPECT_TRUE(r.ok()) << r.status();
      if (r.ok()) out.push_back(std::move(*r));
    }
    return out;
  }
  void ExpectJobSucceeds(std::vector<Ranks>& nodes) {
    ASSERT_EQ(nodes.size(), 2u);
    for (size_t n = 0; n < nodes.size(); ++n) {
      for (const RankResult& r : nodes[n].Wait(kJobTimeout)) {
        EXPECT_EQ(r.exit_code, 0) << "node " << n << ":\n" << r.output;
      }
    }
    for (const auto& d : daemons_) EXPECT_TRUE(d->Alive()) << d->Log();
  }
  // Node a's threads and open files come back to about what they were idle.
  void ExpectBackToIdle() {
    const pid_t pid = daemons_[0]->pid();
    constexpr int kSlack = 8;
    EXPECT_TRUE(WaitUntil(
        [&] {
          return ProcStatus(pid, "Threads") <= idle_threads_ + kSlack &&
                 OpenFiles(pid) <= idle_files_ + kSlack;
        },
        absl::Seconds(20), absl::Milliseconds(50)))
        << "threads " << ProcStatus(pid, "Threads") << " (idle " << idle_threads_ << "), files "
        << OpenFiles(pid) << " (idle " << idle_files_ << ")";
  }

  std::vector<std::unique_ptr<DaemonProcess>> daemons_;
  std::string coordinator_;
  int64_t idle_threads_ = 0;
  int idle_files_ = 0;
};

TEST_F(PeerSharesTest, HugeFirstMessagesAreRefusedBeforeKolodBuffersThem) {
  const pid_t pid = daemons_[0]->pid();
  auto channel = Mallory("c");
  auto stub = kolo::v1::Peer::NewStub(channel);
  std::vector<Ranks> job = StartJob("job-huge");
  const int64_t peak_before = ProcStatus(pid, "VmHWM");
  ASSERT_GT(peak_before, 0);
  // Streams without the job's token: kolod reads none of their messages, so
  // what it holds of each is the stream's flow-control window. Past the
  // failure budget they are refused before even that.
  constexpr int kStreams = 48;
  constexpr size_t kMessageBytes = 4 << 20;
  kolo::v1::MemberMessage huge = Hello("job-huge", kTestJobToken);
  huge.mutable_hello()->set_node(std::string(kMessageBytes, 'm'));
  std::vector<grpc::Status> results(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      auto s = Open(stub.get(), absl::Seconds(20), "", "");
      s->stream->Write(huge);
      kolo::v1::CoordinatorMessage msg;
      while (s->stream->Read(&msg)) {
      }
      results[i] = s->stream->Finish();
    });
  }
  for (std::thread& t : threads) t.join();
  int budget_refused = 0;
  for (const grpc::Status& s : results) {
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++budget_refused;
      EXPECT_TRUE(absl::StrContains(s.error_message(), "it is refused for another"))
          << s.error_message();
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
    }
  }
  // The streams race each other, so how many got past the check before the
  // 33rd failure was counted varies; at least that many failed, and once
  // they are all done the budget is spent: the next stream is refused.
  EXPECT_GE(kStreams - budget_refused, 33);  // past FailureBudgetLimits::max_failures
  {
    auto late = Open(stub.get(), absl::Seconds(20), "", "");
    late->stream->Write(huge);
    kolo::v1::CoordinatorMessage msg;
    while (late->stream->Read(&msg)) {
    }
    const grpc::Status s = late->stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "it is refused for another"))
        << s.error_message();
  }
  const int64_t grown_kb = ProcStatus(pid, "VmHWM") - peak_before;
  const int64_t sent_kb = int64_t{kStreams} * kMessageBytes / 1024;
  std::printf("kolod's peak RSS grew by %lld kB while %lld kB were sent\n",
              static_cast<long long>(grown_kb), static_cast<long long>(sent_kb));
  EXPECT_LT(grown_kb, sent_kb / 8)
      << "kolod's peak RSS grew by " << grown_kb << " kB while " << sent_kb << " kB were sent";
  ExpectJobSucceeds(job);
  ExpectBackToIdle();
}

TEST_F(PeerSharesTest, HellosForJobsThatDoNotExistTakeOnlyTheirShareAndExpire) {
  // With node b's own certificate: the same peer identity as node b's kolod.
  auto channel = Mallory("b");
  auto stub = kolo::v1::Peer::NewStub(channel);
  constexpr int kShare = 8;  // PeerServiceLimits::max_unknown_job_streams_per_peer
  constexpr absl::Duration kWait = absl::Seconds(10);  // PeerServiceLimits::unknown_job_wait
  const absl::Time opened = absl::Now();
  std::vector<std::unique_ptr<RawStream>> held;
  for (int i = 0; i < kShare; ++i) {
    const std::string ghost = absl::StrCat("ghost-", i);
    held.push_back(Open(stub.get(), absl::Seconds(40), ghost, kTestJobToken));
    ASSERT_TRUE(held.back()->stream->Write(Hello(ghost, kTestJobToken)));
  }
  for (auto& h : held) {
    kolo::v1::CoordinatorMessage msg;
    // A held Hello is kept alive with heartbeats.
    ASSERT_TRUE(h->stream->Read(&msg));
    EXPECT_TRUE(msg.has_heartbeat());
  }
  for (int i = 0; i < 3; ++i) {
    const std::string ghost = absl::StrCat("ghost-extra-", i);
    auto extra = Open(stub.get(), absl::Seconds(20), ghost, kTestJobToken);
    extra->stream->Write(Hello(ghost, kTestJobToken));
    kolo::v1::CoordinatorMessage msg;
    EXPECT_FALSE(extra->stream->Read(&msg));
    grpc::Status s = extra->stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "Hellos waiting")) << s.error_message();
  }
  // Node b's member may come while the share is full: it is refused for now
  // and says Hello again until it joins.
  std::vector<Ranks> job = StartJob("job-early");
  for (auto& h : held) {
    kolo::v1::CoordinatorMessage msg;
    while (h->stream->Read(&msg)) {
    }
    grpc::Status s = h->stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "has not started here")) << s.error_message();
  }
  EXPECT_LT(absl::Now() - opened, kWait + absl::Seconds(5));
  ExpectJobSucceeds(job);
  ExpectBackToIdle();
}

TEST_F(PeerSharesTest, WrongTokensAreCutByTheFailureBudgetWithoutDisturbingTheJob) {
  auto channel = Mallory("c");
  auto stub = kolo::v1::Peer::NewStub(channel);
  std::vector<Ranks> job = StartJob("job-token");
  int denied = 0;
  std::string cut;
  // Until the job has started on node a a Hello for it is held: mallory
  // gives up on such a stream at its first heartbeat and tries again.
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = Open(stub.get(), absl::Seconds(10), "job-token", kWrongToken);
        s->stream->Write(Hello("job-token", kWrongToken));
        kolo::v1::CoordinatorMessage msg;
        if (s->stream->Read(&msg)) {
          s->context.TryCancel();
          s->stream->Finish();
          return false;
        }
        grpc::Status st = s->stream->Finish();
        if (st.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
          ++denied;
          return false;
        }
        cut = absl::StrCat(st.error_code(), ": ", st.error_message());
        return true;
      },
      absl::Seconds(30), absl::Milliseconds(5)));
  EXPECT_TRUE(absl::StartsWith(cut, absl::StrCat(grpc::StatusCode::RESOURCE_EXHAUSTED, ":")))
      << cut;
  EXPECT_TRUE(absl::StrContains(cut, "it is refused for another")) << cut;
  EXPECT_EQ(denied, 33);  // FailureBudgetLimits::max_failures, then one more
  // Refused at once from now on, while another peer (node b) goes on.
  auto again = Open(stub.get(), absl::Seconds(10), "job-token", kWrongToken);
  again->stream->Write(Hello("job-token", kWrongToken));
  kolo::v1::CoordinatorMessage msg;
  EXPECT_FALSE(again->stream->Read(&msg));
  EXPECT_EQ(again->stream->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ExpectJobSucceeds(job);
  ExpectBackToIdle();
}

}  // namespace
}  // namespace kolo::testing
