// ClientOptions::FromEnv: Kolo's own variables, and those of OpenMPI's
// mpirun and Slurm's srun when KOLO_RANK is absent.
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "kolo/kolo.h"

namespace kolo {
namespace {

class ClientOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Clear();
    // The token file of ranks without KOLO_JOB_TOKEN: in the test's own
    // directory, never the user's home.
    const char* tmp = std::getenv("TEST_TMPDIR");
    token_file_ = std::string(tmp ? tmp : "/tmp") + "/options_test_job_token";
    unlink(token_file_.c_str());
    setenv("KOLO_JOB_TOKEN_FILE", token_file_.c_str(), 1);
  }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* v : {"KOLO_RANK",
                          "KOLO_SIZE",
                          "KOLO_LOCAL_RANK",
                          "KOLO_LOCAL_SIZE",
                          "KOLO_COORDINATOR",
                          "KOLO_JOB_ID",
                          "KOLO_JOB_TOKEN",
                          "KOLO_JOB_TOKEN_FILE",
                          "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                          "OMPI_MCA_ess_base_jobid",
                          "SLURM_PROCID",
                          "SLURM_NTASKS",
                          "SLURM_LOCALID",
                          "SLURM_NTASKS_PER_NODE",
                          "SLURM_STEP_TASKS_PER_NODE",
                          "SLURM_JOB_ID",
                          "SLURM_STEP_ID"}) {
      unsetenv(v);
    }
  }
  std::string token_file_;
};

TEST_F(ClientOptionsTest, KoloVariablesWithACoordinator) {
  setenv("KOLO_RANK", "3", 1);
  setenv("KOLO_SIZE", "4", 1);
  setenv("KOLO_LOCAL_RANK", "1", 1);
  setenv("KOLO_LOCAL_SIZE", "2", 1);
  setenv("KOLO_COORDINATOR", "hostA:7371", 1);
  auto o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 3);
  EXPECT_EQ(o->size, 4);
  EXPECT_EQ(o->local_rank, 1);
  EXPECT_EQ(o->local_size, 2);
  EXPECT_EQ(o->coordinator, "hostA:7371");
}

TEST_F(ClientOptionsTest, WithoutLocalValuesTheJobIsOneNode) {
  setenv("KOLO_RANK", "2", 1);
  setenv("KOLO_SIZE", "3", 1);
  auto o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->local_rank, 2);
  EXPECT_EQ(o->local_size, 3);
}

TEST_F(ClientOptionsTest, OpenMpiEnvironment) {
  setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  setenv("OMPI_MCA_ess_base_jobid", "1234", 1);
  auto o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 5);
  EXPECT_EQ(o->size, 8);
  EXPECT_EQ(o->local_rank, 1);
  EXPECT_EQ(o->local_size, 4);
  EXPECT_EQ(o->job_id, "ompi-1234");
}

TEST_F(ClientOptionsTest, SlurmEnvironment) {
  setenv("SLURM_PROCID", "2", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_LOCALID", "0", 1);
  setenv("SLURM_NTASKS_PER_NODE", "2", 1);
  setenv("SLURM_JOB_ID", "99", 1);
  setenv("SLURM_STEP_ID", "3", 1);
  auto o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 2);
  EXPECT_EQ(o->size, 4);
  EXPECT_EQ(o->local_rank, 0);
  EXPECT_EQ(o->local_size, 2);
  EXPECT_EQ(o->job_id, "slurm-99.3");
  // Without KOLO_JOB_TOKEN, every rank of the user reads one token file.
  EXPECT_EQ(o->job_token.size(), 32u);
  auto again = ClientOptions::FromEnv();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->job_token, o->job_token);
}

TEST_F(ClientOptionsTest, JobTokenFromTheEnvironmentOrFreshForOneRank) {
  setenv("KOLO_JOB_TOKEN", "explicit", 1);
  auto o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->job_token, "explicit");
  unsetenv("KOLO_JOB_TOKEN");
  auto alone = ClientOptions::FromEnv();
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->size, 1);
  EXPECT_EQ(alone->job_token.size(), 32u);
  EXPECT_NE(access(token_file_.c_str(), F_OK), 0) << "a lone rank needs no token file";
}

TEST_F(ClientOptionsTest, KoloVariablesWinOverTheLauncher) {
  setenv("KOLO_RANK", "0", 1);
  setenv("KOLO_SIZE", "1", 1);
  setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  auto o = ClientOptions::FromEnv();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->rank, 0);
  EXPECT_EQ(o->size, 1);
}

TEST_F(ClientOptionsTest, BadValuesAreNamed) {
  setenv("KOLO_RANK", "x", 1);
  auto o = ClientOptions::FromEnv();
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("KOLO_RANK"), absl::string_view::npos);
}

}  // namespace
}  // namespace kolo
