#include "daemon/observe/metrics.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon {
namespace {

// The samples of a rendering, keyed by `name{labels}` (or `name`) as written.
std::map<std::string, std::string> Samples(const std::string& text) {
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line.front() == '#') continue;
    size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) continue;
    out[std::string(line.substr(0, space))] = std::string(line.substr(space + 1));
  }
  return out;
}

double Value(const std::map<std::string, std::string>& samples, const std::string& key) {
  auto it = samples.find(key);
  if (it == samples.end()) {
    ADD_FAILURE() << "no sample " << key;
    return -1;
  }
  return std::strtod(it->second.c_str(), nullptr);
}

TEST(MetricsTest, RenderCountsTensorsBytesResponsesAndErrorsByOpAndDtype) {
  Metrics metrics;
  metrics.RecordResponse(CollectiveKind::kAllreduce, DType::kFloat32, 2, 800);
  metrics.RecordResponse(CollectiveKind::kAllreduce, DType::kFloat32, 1, 400);
  metrics.RecordResponse(CollectiveKind::kBroadcast, DType::kInt64, 1, 64);
  metrics.RecordError(CollectiveKind::kAllreduce);
  metrics.RecordError(CollectiveKind::kAllreduce);
  const std::string text = metrics.Render();

  EXPECT_NE(text.find("\nkolo_collectives_total{op=\"allreduce\",dtype=\"float32\"} 3\n"),
            std::string::npos)
      << text;
  auto s = Samples(text);
  EXPECT_EQ(s["kolo_collectives_total{op=\"allreduce\",dtype=\"float32\"}"], "3");
  EXPECT_EQ(s["kolo_collectives_total{op=\"broadcast\",dtype=\"int64\"}"], "1");
  EXPECT_EQ(s["kolo_collectives_total{op=\"allreduce\",dtype=\"int64\"}"], "0");
  EXPECT_EQ(s["kolo_bytes_total{op=\"allreduce\",dtype=\"float32\"}"], "1200");
  EXPECT_EQ(s["kolo_bytes_total{op=\"broadcast\",dtype=\"int64\"}"], "64");
  EXPECT_EQ(s["kolo_responses_total{op=\"allreduce\"}"], "2");
  EXPECT_EQ(s["kolo_responses_total{op=\"broadcast\"}"], "1");
  EXPECT_EQ(s["kolo_errors_total{op=\"allreduce\"}"], "2");
  EXPECT_EQ(s["kolo_errors_total{op=\"broadcast\"}"], "0");
  EXPECT_EQ(s["kolo_stalls_total"], "0");
}

TEST(MetricsTest, RenderCountsEveryCollectiveThatRunsOnABackend) {
  const CollectiveKind kinds[] = {CollectiveKind::kAllreduce, CollectiveKind::kBroadcast,
                                  CollectiveKind::kAllgather, CollectiveKind::kReducescatter,
                                  CollectiveKind::kAlltoall,  CollectiveKind::kBarrier};
  Metrics metrics;
  uint64_t n = 1;
  for (CollectiveKind kind : kinds) {
    metrics.RecordResponse(kind, DType::kFloat32, static_cast<int>(n), 8 * n);
    metrics.RecordError(kind);
    ++n;
  }
  auto s = Samples(metrics.Render());
  n = 1;
  for (CollectiveKind kind : kinds) {
    const std::string op = CollectiveKindName(kind);
    EXPECT_EQ(s["kolo_collectives_total{op=\"" + op + "\",dtype=\"float32\"}"], std::to_string(n))
        << op;
    EXPECT_EQ(s["kolo_bytes_total{op=\"" + op + "\",dtype=\"float32\"}"], std::to_string(8 * n))
        << op;
    EXPECT_EQ(s["kolo_errors_total{op=\"" + op + "\"}"], "1") << op;
    ++n;
  }
}

TEST(MetricsTest, RenderCountsStalls) {
  Metrics metrics;
  metrics.RecordStall();
  metrics.RecordStall();
  EXPECT_EQ(Samples(metrics.Render())["kolo_stalls_total"], "2");
}

TEST(MetricsTest, LatencyHistogramIsCumulativeEndsWithInfEqualToCountAndSums) {
  Metrics metrics;
  metrics.RecordLatency(CollectiveKind::kAllreduce, absl::Microseconds(3));
  metrics.RecordLatency(CollectiveKind::kAllreduce, absl::Milliseconds(3));
  metrics.RecordLatency(CollectiveKind::kAllreduce, absl::Seconds(5));
  metrics.RecordLatency(CollectiveKind::kAllreduce, absl::Seconds(100));
  metrics.RecordLatency(CollectiveKind::kBroadcast, absl::Milliseconds(20));
  const std::string text = metrics.Render();
  auto s = Samples(text);

  const std::string prefix = "kolo_collective_latency_seconds_bucket{op=\"allreduce\",le=\"";
  EXPECT_EQ(s[prefix + "5e-06\"}"], "1");
  EXPECT_EQ(s[prefix + "0.0025\"}"], "1");
  EXPECT_EQ(s[prefix + "0.01\"}"], "2");
  EXPECT_EQ(s[prefix + "1\"}"], "2");
  EXPECT_EQ(s[prefix + "10\"}"], "3");
  EXPECT_EQ(s[prefix + "60\"}"], "3");
  EXPECT_EQ(s[prefix + "+Inf\"}"], "4");
  EXPECT_EQ(s["kolo_collective_latency_seconds_count{op=\"allreduce\"}"], "4");
  EXPECT_NEAR(Value(s, "kolo_collective_latency_seconds_sum{op=\"allreduce\"}"), 105.003003, 1e-9);
  EXPECT_EQ(s["kolo_collective_latency_seconds_count{op=\"broadcast\"}"], "1");
  EXPECT_NEAR(Value(s, "kolo_collective_latency_seconds_sum{op=\"broadcast\"}"), 0.02, 1e-9);

  // Per op, buckets appear in order, never decrease, and the last is +Inf
  // with the same value as _count.
  for (const std::string& op : {std::string("allreduce"), std::string("broadcast")}) {
    const std::string bucket = "kolo_collective_latency_seconds_bucket{op=\"" + op + "\",le=\"";
    std::vector<std::pair<std::string, double>> buckets;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      if (!absl::StartsWith(line, bucket)) continue;
      size_t end = line.find('"', bucket.size());
      buckets.push_back(
          {std::string(line.substr(bucket.size(), end - bucket.size())),
           std::strtod(std::string(line.substr(line.rfind(' ') + 1)).c_str(), nullptr)});
    }
    ASSERT_EQ(buckets.size(), Metrics::kLatencyBuckets.size() + 1) << op;
    for (size_t i = 1; i < buckets.size(); ++i) {
      EXPECT_GE(buckets[i].second, buckets[i - 1].second) << op << " le=" << buckets[i].first;
    }
    EXPECT_EQ(buckets.back().first, "+Inf") << op;
    EXPECT_EQ(buckets.back().second,
              Value(s, "kolo_collective_latency_seconds_count{op=\"" + op + "\"}"))
        << op;
  }
}

TEST(MetricsTest, GaugesComeFromTheCallbacksAndAreZeroWithoutThem) {
  Metrics metrics;
  auto s = Samples(metrics.Render());
  EXPECT_EQ(s["kolo_sessions"], "0");
  EXPECT_EQ(s["kolo_jobs"], "0");
  int sessions = 7;
  metrics.SetGauges([&sessions] { return sessions; }, [] { return 2; });
  s = Samples(metrics.Render());
  EXPECT_EQ(s["kolo_sessions"], "7");
  EXPECT_EQ(s["kolo_jobs"], "2");
  sessions = 5;  // read at render time, not when set
  EXPECT_EQ(Samples(metrics.Render())["kolo_sessions"], "5");
}

TEST(MetricsTest, EveryLineIsValidExpositionAndEveryFamilyHasHelpAndType) {
  Metrics metrics;
  metrics.RecordResponse(CollectiveKind::kAllreduce, DType::kBFloat16, 4, 1 << 20);
  metrics.RecordLatency(CollectiveKind::kAllreduce, absl::Microseconds(250));
  metrics.RecordError(CollectiveKind::kBroadcast);
  metrics.RecordStall();
  metrics.SetGauges([] { return 1; }, [] { return 1; });
  const std::string text = metrics.Render();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');

  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*")"
                          R"((,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*")*\})? )"
                          R"(([-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|[-+]Inf|NaN)$)");
  const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*$)");
  const std::regex type(
      R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  std::set<std::string> helped;
  std::map<std::string, std::string> typed;
  std::set<std::string> sampled_families;
  for (absl::string_view sv : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::string line(sv);
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      EXPECT_TRUE(helped.insert(m[1]).second) << "second HELP: " << line;
      continue;
    }
    if (std::regex_match(line, m, type)) {
      EXPECT_TRUE(helped.count(m[1])) << "TYPE before HELP: " << line;
      EXPECT_TRUE(typed.emplace(m[1], m[2]).second) << "second TYPE: " << line;
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, m, sample)) << "malformed line: \"" << line << "\"";
    std::string name = m[1];
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (!typed.count(name) && absl::EndsWith(name, suffix)) {
        std::string base = name.substr(0, name.size() - std::strlen(suffix));
        if (typed.count(base) && typed[base] == "histogram") family = base;
      }
    }
    EXPECT_TRUE(typed.count(family)) << "sample before its TYPE: " << line;
    sampled_families.insert(family);
  }
  for (const auto& [family, kind] : typed) {
    EXPECT_TRUE(sampled_families.count(family)) << "family without samples: " << family;
  }
  EXPECT_EQ(typed["kolo_collectives_total"], "counter");
  EXPECT_EQ(typed["kolo_collective_latency_seconds"], "histogram");
  EXPECT_EQ(typed["kolo_sessions"], "gauge");
  EXPECT_EQ(typed["kolo_jobs"], "gauge");
  EXPECT_EQ(typed["kolo_stalls_total"], "counter");
}

}  // namespace
}  // namespace kolo::daemon
