#include "daemon/plan/job_settings.h"

#include "gtest/gtest.h"

namespace kolo::daemon::plan {
namespace {

TEST(JobSettings, UnsetTakesKolodsDefaults) {
  auto s = Resolve(kolo::v1::JobSettings(), JobSettingsBounds{uint64_t{32} << 20, 500});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->fusion_threshold_bytes, uint64_t{32} << 20);
  EXPECT_EQ(s->cache_capacity, 500u);
  EXPECT_FALSE(s->autotune.enabled);
  EXPECT_EQ(s->autotune.warmup_samples, 3u);
  EXPECT_EQ(s->autotune.steps_per_sample, 10u);
  EXPECT_EQ(s->autotune.max_samples, 20u);
}

TEST(JobSettings, AskedValuesWithinKolodsBounds) {
  kolo::v1::JobSettings asked;
  asked.set_fusion_threshold_bytes(0);  // no fusion
  asked.set_cache_capacity(100);
  auto s = Resolve(asked, JobSettingsBounds{});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->fusion_threshold_bytes, 0u);
  EXPECT_EQ(s->cache_capacity, 100u);
  asked.set_fusion_threshold_bytes(uint64_t{1} << 40);
  asked.set_cache_capacity(1 << 30);
  s = Resolve(asked, JobSettingsBounds{uint64_t{64} << 20, 1024});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->fusion_threshold_bytes, uint64_t{64} << 20);
  EXPECT_EQ(s->cache_capacity, 1024u);
}

TEST(JobSettings, AutotuneCountsAreBounded) {
  kolo::v1::JobSettings asked;
  asked.mutable_autotune()->set_enabled(true);
  asked.mutable_autotune()->set_steps_per_sample(20000);
  auto s = Resolve(asked, JobSettingsBounds{});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("steps per sample"), std::string::npos);
  asked.mutable_autotune()->set_steps_per_sample(5);
  asked.mutable_autotune()->set_gaussian_process_noise(-1);
  EXPECT_FALSE(Resolve(asked, JobSettingsBounds{}).ok());
  asked.mutable_autotune()->set_gaussian_process_noise(0.5);
  asked.mutable_autotune()->set_max_samples(7);
  s = Resolve(asked, JobSettingsBounds{});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->autotune.steps_per_sample, 5u);
  EXPECT_EQ(s->autotune.max_samples, 7u);
  EXPECT_DOUBLE_EQ(s->autotune.noise, 0.5);
}

TEST(JobSettings, RanksMustAskForTheSame) {
  kolo::v1::JobSettings a, b;
  EXPECT_TRUE(SameAsked(a, "the job", b, "rank 1").ok());
  b.set_fusion_threshold_bytes(uint64_t{64} << 20);  // set, even to the default, differs
  absl::Status s = SameAsked(a, "the job", b, "rank 1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("rank 1 asks for fusion threshold"), std::string::npos) << s;
  EXPECT_NE(s.message().find("kolod's default"), std::string::npos) << s;
  a.set_fusion_threshold_bytes(uint64_t{64} << 20);
  EXPECT_TRUE(SameAsked(a, "the job", b, "rank 1").ok());
  // The tuner's counts differ only where it runs.
  b.mutable_autotune()->set_steps_per_sample(3);
  EXPECT_TRUE(SameAsked(a, "the job", b, "rank 1").ok());
  b.mutable_autotune()->set_enabled(true);
  s = SameAsked(a, "the job", b, "rank 1");
  EXPECT_NE(s.message().find("autotuning"), std::string::npos) << s;
  a.mutable_autotune()->set_enabled(true);
  s = SameAsked(a, "the job", b, "rank 1");
  EXPECT_NE(s.message().find("steps per sample"), std::string::npos) << s;
}

}  // namespace
}  // namespace kolo::daemon::plan
