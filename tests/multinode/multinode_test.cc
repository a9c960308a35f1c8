// Several daemons on one machine, each a "node" with its own socket and peer
// port on loopback (mutual TLS, certificates from //tools:test_peer_certs),
// and ranks spread over them: the collectives of the one-node slice give the
// same results across nodes, and a peer daemon that dies, stops or presents
// the wrong token ends the job on every node with an error naming it, while
// the daemons stay up. A daemon without TLS, or with a certificate from
// another CA, cannot join a TLS coordinator's job.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/handoff.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "proto/kolo/v1/status.grpc.pb.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_session.h"

namespace kolo::testing {
namespace {

std::string PeerAddressOf(const DaemonProcess& d) {
  auto stub = kolo::v1::Status::NewStub(
      grpc::CreateChannel("unix:" + d.socket_path(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  kolo::v1::GetStatusResponse resp;
  if (!stub->GetStatus(&ctx, {}, &resp).ok()) return "";
  auto it = resp.node().config().find("peer_address");
  return it == resp.node().config().end() ? "" : it->second;
}

class MultiNodeTest : public ::testing::Test {
 protected:
  // `nodes` daemons (at most 3: the test CA's a, b and c); extra flags for
  // every one.
  void StartDaemons(int nodes, std::vector<std::string> flags = {}) {
    for (int n = 0; n < nodes; ++n) {
      std::vector<std::string> args = PeerTlsFlags(std::string(1, static_cast<char>('a' + n)));
      args.insert(args.end(), flags.begin(), flags.end());
      AddDaemon(n, args);
    }
    coordinator_ = PeerAddressOf(*daemons_[0]);
    ASSERT_FALSE(coordinator_.empty());
  }
  // One more daemon, named node`n`, with `args`.
  void AddDaemon(int n, std::vector<std::string> args) {
    setenv("UCX_TLS", "tcp", 1);
    std::string dir = MakeTempDir();
    args.push_back(absl::StrCat("--node_name=node", n));
    auto d = DaemonProcess::Start(dir + "/kolod.sock", args);
    ASSERT_TRUE(d.ok()) << d.status();
    daemons_.push_back(std::make_unique<DaemonProcess>(std::move(*d)));
  }
  // Node 1 (started with `args`) cannot join a job of the TLS coordinator
  // (node 0): its rank fails naming the TLS handshake, and the coordinator
  // then runs a job with a proper node 1 (certificate c).
  void ExpectRefusedThenAJobRuns(std::vector<std::string> args) {
    StartDaemons(1);
    AddDaemon(1, std::move(args));
    auto nodes = StartJob("job-refused", 1, {kTestRankPath, "hold"});
    ASSERT_EQ(nodes.size(), 2u);
    auto refused = nodes[1].Wait(absl::Seconds(25));
    ASSERT_EQ(refused.size(), 1u);
    EXPECT_TRUE(absl::StrContains(refused[0].output, "TLS handshake")) << refused[0].output;
    nodes[0].Wait(absl::Milliseconds(1));  // its job waits for node 1: killed
    EXPECT_TRUE(daemons_[0]->Alive() && daemons_[1]->Alive());
    daemons_.pop_back();
    AddDaemon(1, PeerTlsFlags("c"));
    RunScenario("duplicate", 1);
  }

  // Starts `per_node` ranks on each daemon.
  std::vector<Ranks> StartJob(const std::string& job, int per_node,
                              const std::vector<std::string>& argv,
                              const std::vector<std::string>& tokens = {}) {
    std::vector<Ranks> out;
    const int size = per_node * static_cast<int>(daemons_.size());
    for (size_t n = 0; n < daemons_.size(); ++n) {
      auto r = Ranks::StartOnNode(daemons_[n]->socket_path(), job, size,
                                  static_cast<int>(n) * per_node, per_node, coordinator_, argv,
                                  tokens.empty() ? kTestJobToken : tokens[n]);
      EXPECT_TRUE(r.ok()) << r.status();
      if (r.ok()) out.push_back(std::move(*r));
    }
    return out;
  }

  void RunScenario(const std::string& scenario, int per_node,
                   absl::Duration timeout = absl::Seconds(180)) {
    auto nodes = StartJob("job-" + scenario, per_node, {kTestRankPath, scenario});
    for (size_t n = 0; n < nodes.size(); ++n) {
      auto results = nodes[n].Wait(timeout);
      for (size_t r = 0; r < results.size(); ++r) {
        EXPECT_EQ(results[r].exit_code, 0) << "node " << n << " local rank " << r << ":\n"
                                           << results[r].output;
      }
    }
    for (const auto& d : daemons_) EXPECT_TRUE(d->Alive());
  }

  // Waits (up to 20 s) for daemon `n` to list a stall of `name`; its message
  // and missing ranks go to `message` and `missing`.
  grpc::Status AwaitStall(int n, const std::string& name, std::string* message,
                          std::vector<int>* missing) {
    auto stub = kolo::v1::Status::NewStub(grpc::CreateChannel("unix:" + daemons_[n]->socket_path(),
                                                              grpc::InsecureChannelCredentials()));
    grpc::Status listed;
    WaitUntil(
        [&] {
          grpc::ClientContext ctx;
          // Who asks, from the kernel: root sees every job.
          ctx.AddMetadata(kHandoffMetadata, IdentityTicket(daemons_[n]->socket_path()));
          kolo::v1::ListStallsResponse resp;
          listed = stub->ListStalls(&ctx, {}, &resp);
          if (!listed.ok()) return true;
          for (const auto& st : resp.stalls()) {
            if (st.name() == name) {
              *message = st.message();
              missing->assign(st.missing_ranks().begin(), st.missing_ranks().end());
            }
          }
          return !message->empty();
        },
        absl::Seconds(20), absl::Milliseconds(50));
    return listed;
  }

  std::vector<std::unique_ptr<DaemonProcess>> daemons_;
  std::string coordinator_;
};

TEST_F(MultiNodeTest, ThreeNodesTwoRanksEachEveryDtypeAndOp) {
  StartDaemons(3);
  RunScenario("matrix", 2);
}

TEST_F(MultiNodeTest, ThreeNodesSizesUpTo64MiB) {
  StartDaemons(3);
  RunScenario("sizes", 2);
}

TEST_F(MultiNodeTest, ThreeNodesBroadcastFromEveryRoot) {
  StartDaemons(3);
  RunScenario("broadcast", 2);
}

TEST_F(MultiNodeTest, AThousandTensorsInFlightAcrossNodes) {
  StartDaemons(2);
  RunScenario("inflight", 2);
}

TEST_F(MultiNodeTest, MismatchAcrossNodesFailsEveryRank) {
  StartDaemons(2);
  RunScenario("mismatch", 2);
}

TEST_F(MultiNodeTest, DuplicateNameInFlightAcrossNodes) {
  StartDaemons(2);
  RunScenario("duplicate", 1);
}

TEST_F(MultiNodeTest, KilledPeerDaemonAbortsTheJobNamingTheNode) {
  StartDaemons(3, {"--peer_timeout_s=5"});
  auto nodes = StartJob("job-kill", 2, {kTestRankPath, "hold"});
  ASSERT_EQ(nodes.size(), 3u);
  for (auto& n : nodes) {
    ASSERT_TRUE(n.WaitForOutput(0, "holding", absl::Seconds(30)));
    ASSERT_TRUE(n.WaitForOutput(1, "holding", absl::Seconds(30)));
  }
  absl::Time killed = absl::Now();
  daemons_[2]->Kill(SIGKILL);
  for (int n = 0; n < 2; ++n) {
    for (const auto& r : nodes[n].Wait(absl::Seconds(20))) {
      EXPECT_EQ(r.exit_code, 0) << r.output;
      EXPECT_TRUE(absl::StrContains(r.output, "ABORTED")) << r.output;
      EXPECT_TRUE(absl::StrContains(r.output, "node2")) << r.output;
    }
  }
  EXPECT_LT(absl::Now() - killed, absl::Seconds(5));
  for (const auto& r : nodes[2].Wait(absl::Seconds(10))) {
    EXPECT_TRUE(absl::StrContains(r.output, "UNAVAILABLE")) << r.output;
  }
  // The surviving daemons serve a new multi-node job.
  EXPECT_TRUE(daemons_[0]->Alive() && daemons_[1]->Alive());
  daemons_.pop_back();
  RunScenario("duplicate", 1);
}

TEST_F(MultiNodeTest, StoppedPeerDaemonAbortsTheJobAfterThePeerTimeout) {
  StartDaemons(2, {"--peer_timeout_s=2"});
  auto nodes = StartJob("job-stop", 1, {kTestRankPath, "hold"});
  ASSERT_EQ(nodes.size(), 2u);
  ASSERT_TRUE(nodes[0].WaitForOutput(0, "holding", absl::Seconds(30)));
  ASSERT_TRUE(nodes[1].WaitForOutput(0, "holding", absl::Seconds(30)));
  kill(daemons_[1]->pid(), SIGSTOP);
  absl::Time stopped = absl::Now();
  auto results = nodes[0].Wait(absl::Seconds(20));
  EXPECT_LT(absl::Now() - stopped, absl::Seconds(6));
  kill(daemons_[1]->pid(), SIGCONT);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].exit_code, 0) << results[0].output;
  EXPECT_TRUE(absl::StrContains(results[0].output, "ABORTED")) << results[0].output;
  EXPECT_TRUE(absl::StrContains(results[0].output, "node1")) << results[0].output;
  EXPECT_TRUE(absl::StrContains(results[0].output, "sent nothing")) << results[0].output;
}

TEST_F(MultiNodeTest, WrongTokenIsRefused) {
  StartDaemons(2);
  auto nodes = StartJob("job-token", 1, {kTestRankPath, "hold"},
                        {"right-right-right-right-right-ri", "wrong-wrong-wrong-wrong-wrong-wr"});
  ASSERT_EQ(nodes.size(), 2u);
  auto refused = nodes[1].Wait(absl::Seconds(30));
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_TRUE(absl::StrContains(refused[0].output, "wrong job token")) << refused[0].output;
  for (const auto& d : daemons_) EXPECT_TRUE(d->Alive());
}

TEST_F(MultiNodeTest, APlaintextPeerIsRefusedByATlsCoordinator) {
  ExpectRefusedThenAJobRuns({"--peer_address=127.0.0.1:0", "--peer_plaintext"});
}

TEST_F(MultiNodeTest, APeerWithACertificateFromAnotherCaIsRefused) {
  // It trusts the cluster's CA but presents a certificate another CA signed.
  ExpectRefusedThenAJobRuns(PeerTlsFlags("stranger", kOtherCertDir, kTestCertDir));
}

TEST_F(MultiNodeTest, AReachablePeerAddressWithoutTlsIsRefusedAtStart) {
  // Refused before anything binds, so an address of no interface here will do.
  auto d = DaemonProcess::Start(MakeTempDir() + "/kolod.sock", {"--peer_address=10.255.0.1:7371"});
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::StrContains(d.status().message(), "--peer_plaintext")) << d.status();
}

TEST_F(MultiNodeTest, AStallAcrossNodesIsReportedOnTheWaitingNode) {
  StartDaemons(2, {"--stall_warning_s=1"});
  // Rank 1 (node 1) withholds "grad/w1"; rank 0's node has it ready.
  auto nodes = StartJob("job-stall", 1, {kTestRankPath, "withhold"});
  ASSERT_EQ(nodes.size(), 2u);
  ASSERT_TRUE(nodes[1].WaitForOutput(0, "withholding", absl::Seconds(30)));
  std::string message;
  std::vector<int> missing;
  grpc::Status listed = AwaitStall(0, "grad/w1", &message, &missing);
  ASSERT_TRUE(listed.ok()) << listed.error_message();
  EXPECT_EQ(missing.size(), 1u);
  EXPECT_TRUE(absl::StrContains(message, "waiting")) << message;
  EXPECT_TRUE(absl::StrContains(message, "for the other nodes (ranks 1 ")) << message;

  // Node 1's report of "other/tensor" (after the warm-up collective, so
  // once the job's UCX endpoints were up) crossed the data plane to the
  // coordinator's node, sealed (docs/internals.md).
  auto stub = kolo::v1::Status::NewStub(grpc::CreateChannel("unix:" + daemons_[0]->socket_path(),
                                                            grpc::InsecureChannelCredentials()));
  uint64_t over_data_plane = 0;
  grpc::Status got;
  WaitUntil(
      [&] {
        grpc::ClientContext ctx;
        ctx.AddMetadata(kHandoffMetadata, IdentityTicket(daemons_[0]->socket_path()));
        kolo::v1::GetStatusResponse resp;
        got = stub->GetStatus(&ctx, {}, &resp);
        if (!got.ok()) return true;
        for (const auto& job : resp.jobs()) {
          if (job.job_id() == "job-stall") over_data_plane = job.data_plane_negotiation();
        }
        return over_data_plane != 0;
      },
      absl::Seconds(20), absl::Milliseconds(50));
  ASSERT_TRUE(got.ok()) << got.error_message();
  EXPECT_GE(over_data_plane, 1u);
}

// A name every node has cached negotiates in direct rounds between the
// nodes, so a node waiting for it knows which node has not got it: the
// stall names only the ranks of that node.
TEST_F(MultiNodeTest, AStallInDirectRoundsNamesTheNodeThatLacksTheName) {
  StartDaemons(3, {"--stall_warning_s=1"});
  // Rank 2 (node 2) withholds the fourth "grad/w1".
  auto nodes = StartJob("job-stall-cached", 1, {kTestRankPath, "withhold_cached"});
  ASSERT_EQ(nodes.size(), 3u);
  ASSERT_TRUE(nodes[2].WaitForOutput(0, "withholding", absl::Seconds(30)));
  for (int n = 0; n < 2; ++n) {
    std::string message;
    std::vector<int> missing;
    grpc::Status listed = AwaitStall(n, "grad/w1", &message, &missing);
    ASSERT_TRUE(listed.ok()) << listed.error_message();
    EXPECT_EQ(missing, std::vector<int>{2}) << "node " << n << ": " << message;
    EXPECT_TRUE(absl::StrContains(message, "for the other nodes (ranks 2 ")) << message;
  }
}

TEST_F(MultiNodeTest, JoinWithUnevenBatchesAcrossNodes) {
  // Ranks run 2, 4, ... allreduces and join: a node whose ranks partly
  // joined reduces zeros for them; a node whose ranks all joined takes part
  // with zeros; the join returns the last rank everywhere.
  StartDaemons(3);
  RunScenario("join", 2);
}

TEST_F(MultiNodeTest, JoinWithOneRankPerNode) {
  StartDaemons(3);
  RunScenario("join", 1);
}

TEST_F(MultiNodeTest, EveryCollectiveAndProcessSetsSpanNodes) {
  StartDaemons(3);
  RunScenario("multinode_surface", 2);
}

}  // namespace
}  // namespace kolo::testing
