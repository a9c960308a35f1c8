// The Peer service against hostile and slow peers, over real gRPC with
// mutual TLS on loopback (certificates from //tools:test_peer_certs): the
// real PeerService, CoordinatorRegistry and Coordinator; the members are
// raw gRPC streams, so each test controls exactly what a peer sends and
// whether it reads. Every test ends with a normal two-node job planned.
#include "daemon/wire/peer_service.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/wait_until.h"
#include "daemon/wire/member_link.h"
#include "daemon/wire/peer_tls.h"
#include "gtest/gtest.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {
namespace {

using Stream = grpc::ClientReaderWriter<kolo::v1::MemberMessage, kolo::v1::CoordinatorMessage>;

constexpr char kCerts[] = "tools/test_peer_certs";

PeerCredentials Certs(const std::string& name) {
  auto c = PeerCredentials::Tls(PeerTlsFiles{absl::StrCat(kCerts, "/ca.pem"),
                                             absl::StrCat(kCerts, "/", name, ".pem"),
                                             absl::StrCat(kCerts, "/", name, ".key")});
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

kolo::v1::MemberMessage Hello(const std::string& job, const std::string& token, int rank,
                              int size = 2) {
  kolo::v1::MemberMessage m;
  kolo::v1::Hello* h = m.mutable_hello();
  h->set_job_id(job);
  h->set_job_token(token);
  h->set_node(absl::StrCat("node", rank));
  h->set_size(size);
  h->add_ranks(rank);
  h->set_ucx_address(absl::StrCat("ucx-of-", rank));
  return m;
}

kolo::v1::MemberMessage Ready(const std::string& name) {
  kolo::v1::MemberMessage m;
  kolo::v1::TensorMeta* t = m.mutable_ready()->add_tensors();
  t->set_name(name);
  t->set_kind(static_cast<uint32_t>(CollectiveKind::kAllreduce));
  t->set_dtype(static_cast<uint32_t>(DType::kFloat32));
  t->set_op(static_cast<uint32_t>(ReduceOp::kSum));
  t->add_shape(1);
  t->set_bytes(4);
  return m;
}

// One raw member stream.
struct Member {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream;
  // Reads until a message of `kind` (skipping heartbeats); false if the
  // stream ended first.
  bool ReadUntil(kolo::v1::CoordinatorMessage::MsgCase kind, kolo::v1::CoordinatorMessage* out) {
    while (stream->Read(out)) {
      if (out->msg_case() == kind) return true;
    }
    return false;
  }
  grpc::Status Finish() { return stream->Finish(); }
};

class PeerServiceTest : public ::testing::Test {
 protected:
  void Start(PeerServiceLimits limits, ElasticLeaders* leaders = nullptr) {
    auto registry = CoordinatorRegistry::Start(CoordinatorOptions{}, absl::Milliseconds(100),
                                               absl::Seconds(10));
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = std::move(*registry);
    service_ = std::make_unique<PeerService>(registry_.get(), limits, leaders);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", Certs("a").Server(), &port);
    ConfigurePeerServer(limits, &builder);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
    channel_ = grpc::CreateChannel(address_, Certs("b").Channel());
    stub_ = kolo::v1::Peer::NewStub(channel_);
    // Another peer: node c's certificate.
    other_stub_ = kolo::v1::Peer::NewStub(grpc::CreateChannel(address_, Certs("c").Channel()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    server_.reset();
    service_.reset();
    registry_.reset();
  }

  // A stream for `job` and `token` (in its metadata; none when `job` is
  // empty), from node b's certificate or `stub`'s.
  std::unique_ptr<Member> Open(const std::string& job, const std::string& token,
                               kolo::v1::Peer::Stub* stub = nullptr) {
    auto m = std::make_unique<Member>();
    m->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(25)));
    if (!job.empty()) {
      m->context.AddMetadata(kJobIdKey, job);
      m->context.AddMetadata(kJobTokenKey, token);
    }
    m->stream = (stub != nullptr ? stub : stub_.get())->Negotiate(&m->context);
    return m;
  }

  // Two members of a fresh job `job` join (through `stub`, node b's by
  // default), both report one name and both get the plan naming it.
  void ExpectATwoNodeJobIsPlanned(const std::string& job, kolo::v1::Peer::Stub* stub = nullptr) {
    registry_->GetOrCreate(job, "tok", 2);
    std::vector<std::unique_ptr<Member>> members;
    for (int r = 0; r < 2; ++r) {
      members.push_back(Open(job, "tok", stub));
      ASSERT_TRUE(members.back()->stream->Write(Hello(job, "tok", r)));
    }
    kolo::v1::CoordinatorMessage msg;
    for (auto& m : members) ASSERT_TRUE(m->ReadUntil(kolo::v1::CoordinatorMessage::kWelcome, &msg));
    for (auto& m : members) ASSERT_TRUE(m->stream->Write(Ready("grad")));
    for (auto& m : members) {
      ASSERT_TRUE(m->ReadUntil(kolo::v1::CoordinatorMessage::kPlan, &msg));
      ASSERT_EQ(msg.plan().responses_size(), 1);
      EXPECT_EQ(msg.plan().responses(0).members(0).name(), "grad");
    }
    for (auto& m : members) m->context.TryCancel();
  }

  // A member of a job that stops reading is cut off (the abort its job's
  // other member gets names `why`), and another job goes on.
  void ExpectAStalledMemberIsCutOff(const std::string& why);

  // Waits (bounded) until the service holds `n` streams.
  bool AwaitStreams(int n) {
    return WaitUntil([&] { return service_->streams() == n; }, absl::Seconds(10));
  }

  std::unique_ptr<CoordinatorRegistry> registry_;
  std::unique_ptr<PeerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<kolo::v1::Peer::Stub> stub_;
  std::unique_ptr<kolo::v1::Peer::Stub> other_stub_;
};

// Whether `member`'s stream ended with `code` and, if `retry`, asks for the
// Hello again.
void ExpectEnded(Member& member, grpc::StatusCode code, const std::string& text, bool retry) {
  kolo::v1::CoordinatorMessage msg;
  while (member.stream->Read(&msg)) {
  }
  grpc::Status s = member.Finish();
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), text)) << s.error_message();
  const auto& trailers = member.context.GetServerTrailingMetadata();
  EXPECT_EQ(trailers.find(kRetryHelloKey) != trailers.end(), retry) << s.error_message();
}

TEST_F(PeerServiceTest, APreAuthenticationFloodIsBoundedAndCutAtTheDeadline) {
  PeerServiceLimits limits;
  limits.auth_deadline = absl::Milliseconds(500);
  limits.max_streams_per_peer = 4;
  Start(limits);
  registry_->GetOrCreate("job-after-flood", "tok", 2);
  // Four streams that never say Hello hold every slot of this peer...
  std::vector<std::unique_ptr<Member>> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(Open("job-after-flood", "tok"));
  ASSERT_TRUE(AwaitStreams(4));
  // ...so a fifth is refused at once.
  auto fifth = Open("job-after-flood", "tok");
  kolo::v1::CoordinatorMessage msg;
  EXPECT_FALSE(fifth->stream->Read(&msg));
  grpc::Status refused = fifth->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "limit per peer"))
      << refused.error_message();
  // The silent ones are cut at the auth deadline, freeing their slots.
  const absl::Time opened = absl::Now();
  for (auto& m : silent) {
    EXPECT_FALSE(m->stream->Read(&msg));
    EXPECT_FALSE(m->Finish().ok());
  }
  EXPECT_LT(absl::Now() - opened, absl::Seconds(5));
  ASSERT_TRUE(AwaitStreams(0));
  // An oversized first message is refused without joining anything.
  auto big = Open("job-after-flood", "tok");
  kolo::v1::MemberMessage hello = Hello("job-after-flood", "tok", 1);
  hello.mutable_hello()->set_node(std::string(200 << 10, 'x'));
  big->stream->Write(hello);
  EXPECT_FALSE(big->stream->Read(&msg));
  grpc::Status too_big = big->Finish();
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << too_big.error_message();
  EXPECT_TRUE(absl::StrContains(too_big.error_message(), "a Hello takes at most"))
      << too_big.error_message();
  EXPECT_EQ(registry_->size(), 1);
  ExpectATwoNodeJobIsPlanned("job-after-flood");
}

TEST_F(PeerServiceTest, AWrongTokenIsRefusedWithoutDisturbingTheJob) {
  Start(PeerServiceLimits{});
  registry_->GetOrCreate("job-x", "tok", 2);
  auto squatter = Open("job-x", "not-the-token");
  // Refused from its metadata: the write may already find the stream ended.
  squatter->stream->Write(Hello("job-x", "not-the-token", 1));
  kolo::v1::CoordinatorMessage msg;
  EXPECT_FALSE(squatter->stream->Read(&msg));
  grpc::Status s = squatter->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "wrong job token")) << s.error_message();
  // The job still takes its own nodes.
  ExpectATwoNodeJobIsPlanned("job-x");
}

TEST_F(PeerServiceTest, AMemberThatStopsReadingIsCutOffWhileOtherJobsGoOn) {
  PeerServiceLimits limits;
  limits.max_queued_messages = 8;
  Start(limits);
  ExpectAStalledMemberIsCutOff("member node1 stopped reading; 8 messages queued");
}

TEST_F(PeerServiceTest, AMemberThatStopsReadingIsCutOffPastTheQueuesBytes) {
  PeerServiceLimits limits;
  limits.max_queued_bytes = 256 << 10;  // about 8 of the test's plans
  Start(limits);
  ExpectAStalledMemberIsCutOff("member node1 stopped reading;");
}

void PeerServiceTest::ExpectAStalledMemberIsCutOff(const std::string& why) {
  registry_->GetOrCreate("job-slow", "tok", 2);
  auto reader = Open("job-slow", "tok");
  auto stalled = Open("job-slow", "tok");  // says Hello and reports, but never reads
  ASSERT_TRUE(reader->stream->Write(Hello("job-slow", "tok", 0)));
  ASSERT_TRUE(stalled->stream->Write(Hello("job-slow", "tok", 1)));
  kolo::v1::CoordinatorMessage msg;
  ASSERT_TRUE(reader->ReadUntil(kolo::v1::CoordinatorMessage::kWelcome, &msg));
  // Large plans, one at a time (the reader takes each before the next),
  // until the stalled member's transport buffers fill and its queue
  // overflows: the coordinator cuts it off and aborts its job.
  const std::string pad(32 << 10, 'n');
  std::string reason;
  for (int i = 0; i < 5000 && reason.empty(); ++i) {
    const std::string name = absl::StrCat(pad, i);
    // Once the stalled member is cut off, the reader reads on to the abort.
    if (stalled->stream->Write(Ready(name))) reader->stream->Write(Ready(name));
    while (reader->stream->Read(&msg)) {
      if (msg.has_abort()) reason = msg.abort().reason();
      if (msg.has_abort() || msg.has_plan()) break;
    }
  }
  reader->context.TryCancel();
  stalled->context.TryCancel();
  EXPECT_TRUE(absl::StrContains(reason, "RESOURCE_EXHAUSTED")) << reason;
  EXPECT_TRUE(absl::StrContains(reason, why)) << reason;
  // Another job of the same coordinator daemon is planned as usual.
  ExpectATwoNodeJobIsPlanned("job-other");
}

TEST_F(PeerServiceTest, AStreamWithoutItsJobInTheMetadataIsRefusedUnread) {
  Start(PeerServiceLimits{});
  auto bare = Open("", "");
  bare->stream->Write(Hello("job-bare", "tok", 1));
  ExpectEnded(*bare, grpc::StatusCode::UNAUTHENTICATED, "names its job and token in its metadata",
              false);
  // A Hello that names another job than the metadata is refused too.
  registry_->GetOrCreate("job-meta", "tok", 2);
  auto other = Open("job-meta", "tok");
  other->stream->Write(Hello("job-elsewhere", "tok", 1));
  ExpectEnded(*other, grpc::StatusCode::INVALID_ARGUMENT, "another job or token", false);
  ExpectATwoNodeJobIsPlanned("job-meta");
}

// A one-rank report of node b for `job`.
kolo::v1::ElasticReport Report(const std::string& job, const std::string& token) {
  kolo::v1::ElasticReport r;
  r.set_job_id(job);
  r.set_job_token(token);
  r.set_node("nodeb");
  r.set_address("127.0.0.1:1");
  r.set_initial_size(1);
  r.set_min_size(1);
  r.set_max_size(1);
  kolo::v1::ElasticCandidate* c = r.add_candidates();
  c->set_id("session-1");
  c->set_previous_rank(-1);
  return r;
}

grpc::Status CallRendezvous(kolo::v1::Peer::Stub* stub, const kolo::v1::ElasticReport& report,
                            const std::string& job, const std::string& token,
                            kolo::v1::ElasticFormed* formed) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  if (!job.empty()) {
    context.AddMetadata(kJobIdKey, job);
    context.AddMetadata(kJobTokenKey, token);
  }
  return stub->Rendezvous(&context, report, formed);
}

TEST_F(PeerServiceTest, ARendezvousIsReadOnlyOnceItsMetadataNamesAJobKnownHere) {
  ElasticLeaders leaders(ElasticLeaderOptions{});
  Start(PeerServiceLimits{}, &leaders);
  // 4 MiB, over the server's receive bound: where kolod reads it, gRPC
  // refuses it as too large; where kolod does not, the call ends first.
  kolo::v1::ElasticReport big = Report("job-el", "tok");
  big.set_reason(std::string(4 << 20, 'x'));
  kolo::v1::ElasticFormed formed;
  grpc::Status s = CallRendezvous(stub_.get(), big, "", "", &formed);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  s = CallRendezvous(stub_.get(), big, "job-el", "tok", &formed);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "no elastic job job-el")) << s.error_message();
  {
    std::shared_ptr<ElasticLeaders::Expected> expected = leaders.Expect("job-el", "tok");
    // The job is known now, but not with this token.
    s = CallRendezvous(stub_.get(), big, "job-el", "other", &formed);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    // With it, the report is read, and the bound refuses it.
    s = CallRendezvous(stub_.get(), big, "job-el", "tok", &formed);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    // A report that names another job than its metadata is refused.
    s = CallRendezvous(stub_.get(), Report("job-other", "tok"), "job-el", "tok", &formed);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    // The real report forms the job's first epoch: one rank, on node b.
    s = CallRendezvous(stub_.get(), Report("job-el", "tok"), "job-el", "tok", &formed);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(formed.epoch(), 1u);
    EXPECT_TRUE(leaders.Knows("job-el", "tok"));
  }
  // Its group gone, the job's leader still answers its nodes until idle.
  EXPECT_TRUE(leaders.Knows("job-el", "tok"));
  EXPECT_FALSE(leaders.Knows("job-never", "tok"));
  ExpectATwoNodeJobIsPlanned("job-after-rendezvous");
}

TEST_F(PeerServiceTest, HellosForJobsNotStartedTakeAShareAndExpire) {
  PeerServiceLimits limits;
  limits.max_unknown_job_streams_per_peer = 2;
  limits.unknown_job_wait = absl::Milliseconds(800);
  Start(limits);
  const absl::Time opened = absl::Now();
  std::vector<std::unique_ptr<Member>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(Open(absl::StrCat("ghost-", i), "tok"));
    held.back()->stream->Write(Hello(absl::StrCat("ghost-", i), "tok", 1));
  }
  ASSERT_TRUE(WaitUntil([&] { return service_->unknown_job_streams() == 2; }, absl::Seconds(10)));
  // The share is taken: one more is refused at once, asked to retry.
  auto third = Open("ghost-2", "tok");
  third->stream->Write(Hello("ghost-2", "tok", 1));
  ExpectEnded(*third, grpc::StatusCode::RESOURCE_EXHAUSTED, "already has 2 Hellos waiting", true);
  // Another peer has its own share.
  auto other = Open("ghost-3", "tok", other_stub_.get());
  other->stream->Write(Hello("ghost-3", "tok", 1));
  ASSERT_TRUE(WaitUntil([&] { return service_->unknown_job_streams() == 3; }, absl::Seconds(10)));
  // The held ones are answered "not started yet" at the wait's end.
  for (auto& m : held) ExpectEnded(*m, grpc::StatusCode::NOT_FOUND, "has not started here", true);
  ExpectEnded(*other, grpc::StatusCode::NOT_FOUND, "has not started here", true);
  EXPECT_LT(absl::Now() - opened, absl::Seconds(5));
  EXPECT_EQ(service_->unknown_job_streams(), 0);
  ExpectATwoNodeJobIsPlanned("job-after-ghosts");
}

TEST_F(PeerServiceTest, APeerThatKeepsFailingIsRefusedAtOnceWhileOthersGoOn) {
  PeerServiceLimits limits;
  limits.failures.max_failures = 3;
  Start(limits);
  registry_->GetOrCreate("job-y", "tok", 2);
  for (int i = 0; i < 4; ++i) {
    auto m = Open("job-y", "wrong");
    m->stream->Write(Hello("job-y", "wrong", 1));
    ExpectEnded(*m, grpc::StatusCode::PERMISSION_DENIED, "wrong job token", false);
  }
  // Past its budget: a stream that does not name a running job with its
  // token is refused before anything of it is looked at...
  auto cut = Open("job-y", "wrong");
  cut->stream->Write(Hello("job-y", "wrong", 1));
  ExpectEnded(*cut, grpc::StatusCode::RESOURCE_EXHAUSTED, "it is refused for another", true);
  auto unknown = Open("job-unknown", "tok");
  ExpectEnded(*unknown, grpc::StatusCode::RESOURCE_EXHAUSTED, "it is refused for another", true);
  // ...while the job's token still admits a stream of that identity (in
  // plaintext an identity is a host, which every local user there shares),
  // and another peer identity (node c's certificate) is not disturbed.
  ExpectATwoNodeJobIsPlanned("job-y");
  ExpectATwoNodeJobIsPlanned("job-y2", other_stub_.get());
}

// Records what a member link is told.
class RecordingListener : public LinkListener {
 public:
  void OnWelcome(const kolo::v1::Welcome&) override {
    absl::MutexLock l(&mu_);
    welcomed_ = true;
  }
  void OnPlan(std::vector<PlannedEntry> plan) override {
    absl::MutexLock l(&mu_);
    for (const PlannedEntry& e : plan) planned_ += e.names.size();
  }
  void OnLinkAbort(const absl::Status& why) override {
    absl::MutexLock l(&mu_);
    aborted_ = why;
  }
  bool welcomed() {
    absl::MutexLock l(&mu_);
    return welcomed_;
  }
  size_t planned() {
    absl::MutexLock l(&mu_);
    return planned_;
  }
  absl::Status aborted() {
    absl::MutexLock l(&mu_);
    return aborted_;
  }

 private:
  absl::Mutex mu_;
  bool welcomed_ = false;
  size_t planned_ = 0;
  absl::Status aborted_;
};

std::unique_ptr<MemberLink> StartLink(const std::string& address, const std::string& job, int rank,
                                      int size, RecordingListener* listener) {
  auto channel = ConnectPeer(address, absl::Seconds(10), Certs(rank == 0 ? "b" : "c").Channel());
  EXPECT_TRUE(channel.ok()) << channel.status();
  if (!channel.ok()) return nullptr;
  MemberLinkOptions options;
  options.hello = Hello(job, "tok", rank, size).hello();
  auto link = MemberLink::Start(*std::move(channel), options, listener);
  EXPECT_TRUE(link.ok()) << link.status();
  return link.ok() ? *std::move(link) : nullptr;
}

TEST_F(PeerServiceTest, AMemberThatComesBeforeTheJobSaysHelloAgainUntilItJoins) {
  PeerServiceLimits limits;
  limits.unknown_job_wait = absl::Milliseconds(300);
  Start(limits);
  RecordingListener listener;
  auto link = StartLink(address_, "job-late", 0, 1, &listener);
  ASSERT_NE(link, nullptr);
  // Several waits expire (each answered NOT_FOUND) while the job is not here...
  EXPECT_TRUE(StaysFalse([&] { return listener.welcomed() || !listener.aborted().ok(); },
                         absl::Milliseconds(1500)));
  // ...and once it starts, the member's next Hello joins it.
  registry_->GetOrCreate("job-late", "tok", 1);
  EXPECT_TRUE(WaitUntil([&] { return listener.welcomed(); }, absl::Seconds(10)))
      << listener.aborted();
  EXPECT_TRUE(listener.aborted().ok()) << listener.aborted();
}

TEST_F(PeerServiceTest, TenThousandNamesAtOnceAreSplitUnderTheBoundAndPlanned) {
  Start(PeerServiceLimits{});
  registry_->GetOrCreate("job-wide", "tok", 2);
  RecordingListener listeners[2];
  std::unique_ptr<MemberLink> links[2];
  for (int r = 0; r < 2; ++r) {
    links[r] = StartLink(address_, "job-wide", r, 2, &listeners[r]);
    ASSERT_NE(links[r], nullptr);
  }
  for (auto& l : listeners) {
    ASSERT_TRUE(WaitUntil([&] { return l.welcomed(); }, absl::Seconds(10)));
  }
  // A long name each (~2 MB of metadata per node in one batch: several
  // messages under kMaxMemberMessageBytes).
  constexpr int kNames = 10000;
  const std::string pad(150, 'p');
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < kNames; ++i) {
      links[r]->ReportReady(Ready(absl::StrCat(pad, "/", i)).ready().tensors(0));
    }
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(WaitUntil([&] { return listeners[r].planned() == kNames; }, absl::Seconds(30)))
        << "rank " << r << " planned " << listeners[r].planned() << ": " << listeners[r].aborted();
    EXPECT_TRUE(listeners[r].aborted().ok()) << listeners[r].aborted();
  }
}

}  // namespace
}  // namespace kolo::daemon
