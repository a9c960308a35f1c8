#include "client/kolorun/elastic_options.h"

#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::kolorun {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST(ElasticOptionsFromFlagsTest, OffWithoutElasticFlags) {
  ElasticFlags flags;
  flags.max_failures_per_host = 7;  // Tuning alone does not turn it on.
  absl::StatusOr<ElasticOptions> options = ElasticOptionsFromFlags(4, flags);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(options->enabled);
  EXPECT_TRUE(ValidateElasticOptions(4, *options).ok());
}

TEST(ElasticOptionsFromFlagsTest, MinNpAloneDefaultsMaxToNp) {
  absl::StatusOr<ElasticOptions> options = ElasticOptionsFromFlags(4, {.min_np = 2});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->enabled);
  EXPECT_EQ(options->min_ranks, 2);
  EXPECT_EQ(options->max_ranks, 4);
  EXPECT_EQ(options->max_failures_per_host, 3);
  EXPECT_EQ(options->discovery_interval, absl::Seconds(1));
  EXPECT_EQ(options->elastic_timeout, absl::Seconds(600));
  EXPECT_EQ(options->restart_backoff, absl::Seconds(1));
  EXPECT_EQ(options->max_restart_backoff, absl::Seconds(30));
  EXPECT_TRUE(ValidateElasticOptions(4, *options).ok());
}

TEST(ElasticOptionsFromFlagsTest, MaxNpAloneDefaultsMinToNp) {
  absl::StatusOr<ElasticOptions> options = ElasticOptionsFromFlags(2, {.max_np = 8});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->enabled);
  EXPECT_EQ(options->min_ranks, 2);
  EXPECT_EQ(options->max_ranks, 8);
}

TEST(ElasticOptionsFromFlagsTest, DiscoveryScriptLeavesMaxUnbounded) {
  absl::StatusOr<ElasticOptions> options =
      ElasticOptionsFromFlags(3, {.host_discovery_script = "/bin/find-hosts",
                                  .discovery_interval_s = 0.5,
                                  .max_failures_per_host = 5,
                                  .elastic_timeout_s = 20});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->enabled);
  EXPECT_EQ(options->min_ranks, 3);
  EXPECT_EQ(options->max_ranks, 0);
  EXPECT_EQ(options->discovery_script, "/bin/find-hosts");
  EXPECT_EQ(options->discovery_interval, absl::Milliseconds(500));
  EXPECT_EQ(options->max_failures_per_host, 5);
  EXPECT_EQ(options->elastic_timeout, absl::Seconds(20));
  EXPECT_TRUE(ValidateElasticOptions(3, *options).ok());
}

TEST(ElasticOptionsFromFlagsTest, RejectsMaxNpBelowOneAndBadDurations) {
  EXPECT_THAT(Message(ElasticOptionsFromFlags(2, {.max_np = 0}).status()),
              HasSubstr("--max-np must be at least 1, got 0"));
  EXPECT_THAT(
      Message(ElasticOptionsFromFlags(2, {.min_np = 1, .discovery_interval_s = 0}).status()),
      HasSubstr("--discovery-interval-s must be a positive number"));
  EXPECT_THAT(Message(ElasticOptionsFromFlags(2, {.min_np = 1, .elastic_timeout_s = NAN}).status()),
              HasSubstr("--elastic-timeout-s"));
  // Not in elastic mode, the tuning flags are not looked at.
  EXPECT_TRUE(ElasticOptionsFromFlags(2, {.discovery_interval_s = -1}).ok());
}

TEST(ValidateElasticOptionsTest, WantsMinAtMostNpAtMostMax) {
  auto validate = [](int np, int min, int max) {
    ElasticOptions o;
    o.enabled = true;
    o.min_ranks = min;
    o.max_ranks = max;
    return ValidateElasticOptions(np, o);
  };
  EXPECT_TRUE(validate(2, 1, 4).ok());
  EXPECT_TRUE(validate(2, 2, 2).ok());
  EXPECT_TRUE(validate(2, 1, 0).ok());  // No bound.
  EXPECT_THAT(Message(validate(2, 0, 4)), HasSubstr("--min-np must be at least 1, got 0"));
  EXPECT_THAT(Message(validate(2, 3, 4)), HasSubstr("--min-np 3 is more than -np 2"));
  EXPECT_THAT(Message(validate(3, 1, 2)), HasSubstr("--max-np 2 is less than -np 3"));
  EXPECT_EQ(validate(3, 1, 2).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ValidateElasticOptionsTest, ChecksFailuresAndDurations) {
  ElasticOptions o;
  o.enabled = true;
  o.min_ranks = 1;
  o.max_ranks = 2;
  o.max_failures_per_host = 0;
  EXPECT_THAT(Message(ValidateElasticOptions(2, o)),
              HasSubstr("--max-failures-per-host must be at least 1, got 0"));
  o.max_failures_per_host = 1;
  o.restart_backoff = absl::Seconds(2);
  o.max_restart_backoff = absl::Seconds(1);
  EXPECT_THAT(Message(ValidateElasticOptions(2, o)), HasSubstr("back-off"));
  o.max_restart_backoff = absl::Seconds(2);
  o.discovery_timeout = absl::ZeroDuration();
  EXPECT_FALSE(ValidateElasticOptions(2, o).ok());
}

}  // namespace
}  // namespace kolo::kolorun
