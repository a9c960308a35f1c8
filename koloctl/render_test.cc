#include "koloctl/render.h"

#include <gtest/gtest.h>

namespace kolo::koloctl {
namespace {

TEST(RenderTest, EmptyAnswers) {
  EXPECT_EQ(RenderJobs({}), "no jobs\n");
  EXPECT_EQ(RenderStalls({}), "no stalls\n");
  kolo::v1::GetStatusResponse status;
  EXPECT_NE(RenderStatus(status).find("jobs: none\n"), std::string::npos);
}

TEST(RenderTest, StallLineWithoutMessageIsComposed) {
  kolo::v1::Stall stall;
  stall.set_name("grad/w1");
  stall.set_collective("allreduce");
  stall.set_waiting_s(61);
  for (int r : {0, 1, 2, 4, 5, 6}) stall.add_submitted_ranks(r);
  stall.add_missing_ranks(7);
  stall.add_missing_ranks(3);
  EXPECT_EQ(StallLine(stall),
            "allreduce \"grad/w1\" waiting 1m01s for ranks 3,7 (submitted: 0-2,4-6)");
  stall.set_kind("executing");
  EXPECT_EQ(StallLine(stall), "allreduce \"grad/w1\" executing for 1m01s");
  stall.set_message("as the daemon says");
  EXPECT_EQ(StallLine(stall), "as the daemon says");
}

TEST(RenderTest, JobWithoutRanksOrHistory) {
  kolo::v1::JobDetail detail;
  detail.mutable_job()->set_job_id("j");
  detail.mutable_job()->set_state("aborted");
  detail.mutable_job()->set_error("rank 2 died");
  const std::string text = RenderJob(detail);
  EXPECT_NE(text.find("job j: aborted, size 0, 0/0 attached"), std::string::npos) << text;
  EXPECT_NE(text.find("  error: rank 2 died\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ranks:\n  none\n"), std::string::npos) << text;
  EXPECT_NE(text.find("pending tensors:\n  none\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("stalls:"), std::string::npos) << text;
  EXPECT_EQ(text.find("errors"), std::string::npos) << text;
}

TEST(RenderTest, AnElasticJobListsItsEpochs) {
  kolo::v1::JobDetail detail;
  kolo::v1::JobInfo* job = detail.mutable_job();
  job->set_job_id("e");
  job->set_size(3);
  job->set_epoch(3);
  auto* first = job->add_epochs();
  first->set_epoch(1);
  first->set_size(3);
  first->set_reason("started");
  auto* second = job->add_epochs();
  second->set_epoch(2);
  second->set_at_s(12.5);
  second->set_size(2);
  second->set_left(1);
  second->set_reason("rank 1 died: pid 7 exited");
  auto* third = job->add_epochs();
  third->set_epoch(3);
  third->set_at_s(20.25);
  third->set_size(3);
  third->add_joined(2);
  third->set_reason("rank 0 reset (1 rank(s) waiting to join)");
  const std::string text = RenderJob(detail);
  EXPECT_NE(text.find("epochs (elastic; now epoch 3):"), std::string::npos) << text;
  EXPECT_NE(text.find("+12.500s"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1 died: pid 7 exited"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0 reset (1 rank(s) waiting to join)"), std::string::npos) << text;
  kolo::v1::GetStatusResponse status;
  *status.add_jobs() = *job;
  EXPECT_NE(RenderStatus(status).find("size 3, epoch 3"), std::string::npos);
}

}  // namespace
}  // namespace kolo::koloctl
