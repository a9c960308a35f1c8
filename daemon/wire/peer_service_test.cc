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
  void Start(PeerServiceLimits limits) {
    auto registry = CoordinatorRegistry::Start(CoordinatorOptions{}, absl::Milliseconds(100),
                                               absl::Seconds(10));
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = std::move(*registry);
    service_ = std::make_unique<PeerService>(registry_.get(), limits);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", Certs("a").Server(), &port);
    builder.SetMaxReceiveMessageSize(kMaxMemberMessageBytes);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), Certs("b").Channel());
    stub_ = kolo::v1::Peer::NewStub(channel_);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    server_.reset();
    service_.reset();
    registry_.reset();
  }

  std::unique_ptr<Member> Open() {
    auto m = std::make_unique<Member>();
    m->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(25)));
    m->stream = stub_->Negotiate(&m->context);
    return m;
  }

  // Two members of a fresh job `job` join, both report one name and both
  // get the plan naming it.
  void ExpectATwoNodeJobIsPlanned(const std::string& job) {
    registry_->GetOrCreate(job, "tok", 2);
    std::vector<std::unique_ptr<Member>> members;
    for (int r = 0; r < 2; ++r) {
      members.push_back(Open());
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

  // Waits (bounded) until the service holds `n` streams.
  bool AwaitStreams(int n) {
    return WaitUntil([&] { return service_->streams() == n; }, absl::Seconds(10));
  }

  std::unique_ptr<CoordinatorRegistry> registry_;
  std::unique_ptr<PeerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<kolo::v1::Peer::Stub> stub_;
};

TEST_F(PeerServiceTest, APreAuthenticationFloodIsBoundedAndCutAtTheDeadline) {
  PeerServiceLimits limits;
  limits.auth_deadline = absl::Milliseconds(500);
  limits.max_streams_per_peer = 4;
  Start(limits);
  // Four streams that never say Hello hold every slot of this peer...
  std::vector<std::unique_ptr<Member>> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(Open());
  ASSERT_TRUE(AwaitStreams(4));
  // ...so a fifth is refused at once.
  auto fifth = Open();
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
  auto big = Open();
  kolo::v1::MemberMessage hello = Hello("job-big", "tok", 1);
  hello.mutable_hello()->set_node(std::string(200 << 10, 'x'));
  big->stream->Write(hello);
  EXPECT_FALSE(big->stream->Read(&msg));
  grpc::Status too_big = big->Finish();
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << too_big.error_message();
  EXPECT_TRUE(absl::StrContains(too_big.error_message(), "a Hello takes at most"))
      << too_big.error_message();
  EXPECT_EQ(registry_->size(), 0);
  ExpectATwoNodeJobIsPlanned("job-after-flood");
}

TEST_F(PeerServiceTest, AWrongTokenIsRefusedWithoutDisturbingTheJob) {
  Start(PeerServiceLimits{});
  registry_->GetOrCreate("job-x", "tok", 2);
  auto squatter = Open();
  ASSERT_TRUE(squatter->stream->Write(Hello("job-x", "not-the-token", 1)));
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
  registry_->GetOrCreate("job-slow", "tok", 2);
  auto reader = Open();
  auto stalled = Open();  // says Hello and reports, but never reads
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
  EXPECT_TRUE(absl::StrContains(reason, "member node1 stopped reading; 8 messages queued"))
      << reason;
  // Another job of the same coordinator daemon is planned as usual.
  ExpectATwoNodeJobIsPlanned("job-other");
}

}  // namespace
}  // namespace kolo::daemon
