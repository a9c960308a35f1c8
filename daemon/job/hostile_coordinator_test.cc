// A plan that would drive reads past a rank's buffer, from a coordinator
// that lies: a job across two daemons in one process (the real Job,
// PeerNegotiator, Coordinator, Peer service and host multi-node backend;
// the data moves over an in-process fabric), node B reaching the
// coordinator through a relay that rewrites the alltoall splits of every
// plan. Node B refuses the plan before touching memory, with an error
// naming the tensor, the rank and both values, and the job ends on both
// nodes; a normal job through the same relay, untouched, then runs.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/wait_until.h"
#include "daemon/backend/fake_backend.h"
#include "daemon/job/default_negotiators.h"
#include "daemon/job/job.h"
#include "daemon/session/loopback_session.h"
#include "daemon/transport/in_process_transport.h"
#include "daemon/wire/peer_service.h"
#include "daemon/wire/peer_tls.h"
#include "gtest/gtest.h"
#include "proto/kolo/v1/peer.grpc.pb.h"

namespace kolo::daemon {
namespace {

// Relays member streams to the real Peer service at `upstream`; while
// `tamper` is set, rank 1 of every planned alltoall sends 1000 rows to
// itself.
class TamperingRelay final : public kolo::v1::Peer::Service {
 public:
  explicit TamperingRelay(std::string upstream) : upstream_(std::move(upstream)) {}
  std::atomic<bool> tamper{false};

  grpc::Status Negotiate(grpc::ServerContext* context,
                         grpc::ServerReaderWriter<kolo::v1::CoordinatorMessage,
                                                  kolo::v1::MemberMessage>* stream) override {
    auto stub =
        kolo::v1::Peer::NewStub(grpc::CreateChannel(upstream_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext up_context;
    // The stream's job and token travel in its metadata (peer_protocol.h).
    for (const char* key : {kJobIdKey, kJobTokenKey}) {
      auto it = context->client_metadata().find(key);
      if (it != context->client_metadata().end()) {
        up_context.AddMetadata(key, std::string(it->second.data(), it->second.size()));
      }
    }
    auto up = stub->Negotiate(&up_context);
    std::thread down([&] {
      kolo::v1::CoordinatorMessage m;
      while (up->Read(&m)) {
        if (tamper.load() && m.has_plan()) {
          for (auto& r : *m.mutable_plan()->mutable_responses()) {
            if (r.splits_size() == 4) r.set_splits(3, 1000);
          }
        }
        if (!stream->Write(m)) break;
      }
      context->TryCancel();
    });
    kolo::v1::MemberMessage m;
    while (stream->Read(&m)) {
      if (!up->Write(m)) break;
    }
    up_context.TryCancel();
    down.join();
    return grpc::Status::OK;
  }

 private:
  const std::string upstream_;
};

// Two nodes of one rank each: node A hosts rank 0 and the coordinator, node
// B reaches it through the relay.
struct TwoNodeJob {
  InProcessFabric fabric{2};
  InProcessTransportFactory transports{&fabric};
  std::vector<std::unique_ptr<LoopbackSession>> sessions;
  std::vector<std::unique_ptr<Job>> jobs;  // last: destroyed first
};

class HostileCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto registry = CoordinatorRegistry::Start(CoordinatorOptions{}, absl::Milliseconds(200),
                                               absl::Seconds(10));
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = std::move(*registry);
    service_ = std::make_unique<PeerService>(registry_.get());
    server_ = Serve(service_.get(), &port_);
    relay_ = std::make_unique<TamperingRelay>(absl::StrCat("127.0.0.1:", port_));
    relay_server_ = Serve(relay_.get(), &relay_port_);
  }
  void TearDown() override {
    jobs_.clear();
    for (auto* s : {relay_server_.get(), server_.get()}) {
      if (s != nullptr) s->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    }
  }
  static std::unique_ptr<grpc::Server> Serve(grpc::Service* service, int* port) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
    builder.RegisterService(service);
    return builder.BuildAndStart();
  }

  TwoNodeJob& StartJob(const std::string& id) {
    auto j = std::make_unique<TwoNodeJob>();
    auto plaintext = std::make_shared<const PeerCredentials>(PeerCredentials::Plaintext());
    for (int r = 0; r < 2; ++r) {
      auto s = LoopbackSession::Create(id, r, 1 << 20);
      EXPECT_TRUE(s.ok()) << s.status();
      j->sessions.push_back(std::move(*s));
      JobLayout layout;
      layout.local_size = 1;
      layout.env.node_name = r == 0 ? "nodeA" : "nodeB";
      layout.env.transports = &j->transports;
      layout.env.peer_credentials = plaintext;
      if (r == 0) {
        layout.env.coordinators = registry_.get();
      } else {
        layout.coordinator = absl::StrCat("127.0.0.1:", relay_port_);
      }
      j->jobs.push_back(std::make_unique<Job>(id, "token", 2, &host_, uint64_t{64} << 20,
                                              DefaultNegotiators(), JobObservers{}, layout));
    }
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(j->jobs[r]->AttachRank(r, absl::StrCat("session-", r), 100 + r).ok());
    }
    for (auto& job : j->jobs) job->MaybeStart();
    jobs_.push_back(std::move(j));
    return *jobs_.back();
  }

  // Rank `rank` submits `kind` "t" of `rows` floats from `input` (an
  // alltoall sending one row to each rank).
  void Submit(TwoNodeJob& j, int rank, CollectiveKind kind, std::vector<float>& input,
              std::vector<float>& output) {
    Request r;
    r.request_id = 1;
    r.rank = rank;
    r.kind = kind;
    r.dtype = DType::kFloat32;
    r.name = "t";
    r.shape = {static_cast<int64_t>(input.size())};
    r.bytes = input.size() * sizeof(float);
    r.input = reinterpret_cast<const uint8_t*>(input.data());
    r.output = reinterpret_cast<uint8_t*>(output.data());
    if (kind == CollectiveKind::kAlltoall) r.aux = {1, 1};
    r.origin = j.sessions[rank]->session();
    r.submitted_at = absl::Now();
    j.jobs[rank]->Submit(std::move(r));
  }

  // Each rank's one completion (bounded wait).
  std::vector<ReceivedCompletion> Completions(TwoNodeJob& j) {
    std::vector<ReceivedCompletion> got(2);
    std::vector<bool> have(2, false);
    EXPECT_TRUE(WaitUntil(
        [&] {
          for (int r = 0; r < 2; ++r) {
            for (ReceivedCompletion& c : j.sessions[r]->TakeCompletions()) {
              got[r] = c;
              have[r] = true;
            }
          }
          return have[0] && have[1];
        },
        absl::Seconds(20)));
    return got;
  }

  FakeBackend host_;
  int port_ = 0;
  int relay_port_ = 0;
  std::unique_ptr<CoordinatorRegistry> registry_;
  std::unique_ptr<PeerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<TamperingRelay> relay_;
  std::unique_ptr<grpc::Server> relay_server_;
  std::vector<std::unique_ptr<TwoNodeJob>> jobs_;
};

TEST_F(HostileCoordinatorTest, AlltoallSplitsPastTheBufferAreRefusedThenAJobRuns) {
  relay_->tamper = true;
  TwoNodeJob& bad = StartJob("job-bad");
  std::vector<float> in[2] = {{1, 2}, {3, 4}};
  std::vector<float> out[2] = {{0, 0}, {0, 0}};
  for (int r = 0; r < 2; ++r) Submit(bad, r, CollectiveKind::kAlltoall, in[r], out[r]);
  std::vector<ReceivedCompletion> done = Completions(bad);
  EXPECT_NE(done[1].code, absl::StatusCode::kOk);
  EXPECT_TRUE(absl::StrContains(done[1].message, "plan is unusable here")) << done[1].message;
  EXPECT_TRUE(absl::StrContains(done[1].message,
                                "alltoall \"t\": the plan has rank 1 send 1000 rows to rank 1; "
                                "it asked to send 1"))
      << done[1].message;
  // The job ends on node A too (its rank would otherwise wait for node B).
  EXPECT_NE(done[0].code, absl::StatusCode::kOk) << done[0].message;

  relay_->tamper = false;
  TwoNodeJob& good = StartJob("job-good");
  std::vector<float> x[2] = {{1, 2}, {10, 20}};
  std::vector<float> sum[2] = {{0, 0}, {0, 0}};
  for (int r = 0; r < 2; ++r) Submit(good, r, CollectiveKind::kAllreduce, x[r], sum[r]);
  done = Completions(good);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(done[r].code, absl::StatusCode::kOk) << done[r].message;
    EXPECT_EQ(sum[r], (std::vector<float>{11, 22})) << "rank " << r;
  }
}

}  // namespace
}  // namespace kolo::daemon
