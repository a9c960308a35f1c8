// ClientOptions::FromEnv under torchrun (or a Kubeflow PyTorchJob): RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/MASTER_PORT and
// TORCHELASTIC_* when KOLO_RANK is absent.
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "kolo/kolo.h"

namespace kolo {
namespace {

class TorchrunEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Clear();
    const char* tmp = std::getenv("TEST_TMPDIR");
    token_file_ = std::string(tmp ? tmp : "/tmp") + "/torchrun_env_test_job_token";
    unlink(token_file_.c_str());
    setenv("KOLO_JOB_TOKEN_FILE", token_file_.c_str(), 1);
    // A socket named: no private kolod for one-node jobs (private_kolod_test).
    setenv("KOLO_SOCKET", "/nonexistent/kolod.sock", 1);
  }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* v :
         {"KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_COORDINATOR",
          "KOLO_SOCKET", "KOLO_JOB_ID", "KOLO_JOB_TOKEN", "KOLO_JOB_TOKEN_FILE", "KOLO_PEER_PORT",
          "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
          "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"}) {
      unsetenv(v);
    }
  }
  static void Torchrun(const char* rank, const char* world, const char* local_rank,
                       const char* local_world) {
    setenv("RANK", rank, 1);
    setenv("WORLD_SIZE", world, 1);
    setenv("LOCAL_RANK", local_rank, 1);
    setenv("LOCAL_WORLD_SIZE", local_world, 1);
    setenv("MASTER_ADDR", "hostA", 1);
    setenv("MASTER_PORT", "29500", 1);
  }
  std::string token_file_;
};

TEST_F(TorchrunEnvTest, OneNodeStandalone) {
  Torchrun("1", "2", "1", "2");
  setenv("GROUP_RANK", "0", 1);
  setenv("TORCHELASTIC_RUN_ID", "3f2a", 1);
  setenv("TORCHELASTIC_RESTART_COUNT", "0", 1);
  auto o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 1);
  EXPECT_EQ(o->size, 2);
  EXPECT_EQ(o->local_rank, 1);
  EXPECT_EQ(o->local_size, 2);
  EXPECT_EQ(o->job_id, "torch-3f2a.0");
  EXPECT_EQ(o->coordinator, "") << "one node needs no coordinator";
  // Without KOLO_JOB_TOKEN, the user's token file: random, not the run id's.
  EXPECT_EQ(o->job_token.size(), 32u);
  EXPECT_EQ(access(token_file_.c_str(), F_OK), 0);
  EXPECT_EQ(o->job_token.find("3f2a"), std::string::npos);
}

TEST_F(TorchrunEnvTest, ARestartIsAnotherJob) {
  Torchrun("0", "2", "0", "2");
  setenv("TORCHELASTIC_RUN_ID", "r", 1);
  setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
  auto o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->job_id, "torch-r.2");
}

TEST_F(TorchrunEnvTest, WithoutARunIdTheMasterNamesTheJob) {
  Torchrun("0", "2", "0", "2");
  setenv("TORCHELASTIC_RUN_ID", "none", 1);
  auto o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->job_id, "torch-hostA:29500");
}

TEST_F(TorchrunEnvTest, AcrossNodesTheMastersKolodCoordinates) {
  Torchrun("3", "4", "1", "2");
  setenv("GROUP_RANK", "1", 1);
  auto o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 3);
  EXPECT_EQ(o->local_rank, 1);
  EXPECT_EQ(o->local_size, 2);
  EXPECT_EQ(o->coordinator, "hostA:7371");
  setenv("KOLO_PEER_PORT", "7400", 1);
  setenv("MASTER_ADDR", "fd00::1", 1);
  o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->coordinator, "[fd00::1]:7400");
  setenv("KOLO_PEER_PORT", "0", 1);
  EXPECT_EQ(ClientOptions::FromEnv().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TorchrunEnvTest, KoloVariablesWin) {
  Torchrun("3", "4", "1", "2");
  setenv("KOLO_COORDINATOR", "hostB:9000", 1);
  setenv("KOLO_JOB_ID", "mine", 1);
  auto o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->coordinator, "hostB:9000");
  EXPECT_EQ(o->job_id, "mine");
  setenv("KOLO_RANK", "0", 1);
  setenv("KOLO_SIZE", "1", 1);
  o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->size, 1);
  EXPECT_EQ(o->local_size, 1);
}

TEST_F(TorchrunEnvTest, PyTorchJobPodWithoutLocalValues) {
  // A Kubeflow PyTorchJob without torchrun: one process per pod.
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "3", 1);
  setenv("MASTER_ADDR", "job-master-0", 1);
  setenv("MASTER_PORT", "23456", 1);
  auto o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->local_rank, 0);
  EXPECT_EQ(o->local_size, 1);
  EXPECT_EQ(o->job_id, "torch-job-master-0:23456");
  EXPECT_EQ(o->coordinator, "job-master-0:7371");
}

TEST_F(TorchrunEnvTest, BadValuesAreNamed) {
  Torchrun("0", "two", "0", "2");
  auto o = ClientOptions::FromEnv();
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("WORLD_SIZE"), absl::string_view::npos);
}

}  // namespace
}  // namespace kolo
