#include "daemon/observe/metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon {
namespace {

// The collectives that run on a backend, so have responses, bytes and
// latencies; the control ones (join, process sets) complete in the job.
constexpr bool OnBackend(const CollectiveTraits& t) {
  return IsCollectiveKind(static_cast<uint32_t>(t.kind)) && !t.control;
}
constexpr size_t CountOnBackend() {
  size_t n = 0;
  for (const CollectiveTraits& t : kCollectiveTraits) n += OnBackend(t) ? 1 : 0;
  return n;
}
constexpr std::array<CollectiveKind, CountOnBackend()> kKindsInOrder = [] {
  std::array<CollectiveKind, CountOnBackend()> kinds{};
  size_t n = 0;
  for (const CollectiveTraits& t : kCollectiveTraits) {
    if (OnBackend(t)) kinds[n++] = t.kind;
  }
  return kinds;
}();

}  // namespace

void Metrics::RecordResponse(CollectiveKind kind, DType dtype, int tensors, uint64_t bytes) {
  int k = KindIndex(kind);
  int t = static_cast<int>(dtype) % kNumDTypes;
  tensors_[k][t].fetch_add(tensors, std::memory_order_relaxed);
  bytes_[k][t].fetch_add(bytes, std::memory_order_relaxed);
  responses_[k].fetch_add(1, std::memory_order_relaxed);
}

void Metrics::RecordLatency(CollectiveKind kind, absl::Duration latency) {
  int k = KindIndex(kind);
  double s = absl::ToDoubleSeconds(latency);
  size_t b = 0;
  while (b < kLatencyBuckets.size() && s > kLatencyBuckets[b]) ++b;
  latency_buckets_[k][b].fetch_add(1, std::memory_order_relaxed);
  latency_count_[k].fetch_add(1, std::memory_order_relaxed);
  latency_sum_ns_[k].fetch_add(absl::ToInt64Nanoseconds(latency), std::memory_order_relaxed);
}

void Metrics::RecordError(CollectiveKind kind) {
  errors_[KindIndex(kind)].fetch_add(1, std::memory_order_relaxed);
}

std::string Metrics::Render() const {
  std::string out;
  auto load = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  absl::StrAppend(&out,
                  "# HELP kolo_collectives_total Tensors completed, by collective and dtype.\n"
                  "# TYPE kolo_collectives_total counter\n");
  for (CollectiveKind kind : kKindsInOrder) {
    for (uint32_t t = 0; t < kNumDTypes; ++t) {
      absl::StrAppend(&out, "kolo_collectives_total{op=\"", CollectiveKindName(kind), "\",dtype=\"",
                      DTypeName(static_cast<DType>(t)), "\"} ", load(tensors_[KindIndex(kind)][t]),
                      "\n");
    }
  }
  absl::StrAppend(&out,
                  "# HELP kolo_bytes_total Bytes reduced or broadcast, by collective and dtype.\n"
                  "# TYPE kolo_bytes_total counter\n");
  for (CollectiveKind kind : kKindsInOrder) {
    for (uint32_t t = 0; t < kNumDTypes; ++t) {
      absl::StrAppend(&out, "kolo_bytes_total{op=\"", CollectiveKindName(kind), "\",dtype=\"",
                      DTypeName(static_cast<DType>(t)), "\"} ", load(bytes_[KindIndex(kind)][t]),
                      "\n");
    }
  }
  absl::StrAppend(&out,
                  "# HELP kolo_responses_total Fused responses executed; "
                  "kolo_collectives_total / kolo_responses_total is the fusion ratio.\n"
                  "# TYPE kolo_responses_total counter\n");
  for (CollectiveKind kind : kKindsInOrder) {
    absl::StrAppend(&out, "kolo_responses_total{op=\"", CollectiveKindName(kind), "\"} ",
                    load(responses_[KindIndex(kind)]), "\n");
  }
  absl::StrAppend(&out,
                  "# HELP kolo_errors_total Tensors that completed with an error.\n"
                  "# TYPE kolo_errors_total counter\n");
  for (CollectiveKind kind : kKindsInOrder) {
    absl::StrAppend(&out, "kolo_errors_total{op=\"", CollectiveKindName(kind), "\"} ",
                    load(errors_[KindIndex(kind)]), "\n");
  }
  absl::StrAppend(
      &out,
      "# HELP kolo_collective_latency_seconds First submission to completion of a tensor.\n"
      "# TYPE kolo_collective_latency_seconds histogram\n");
  for (CollectiveKind kind : kKindsInOrder) {
    int k = KindIndex(kind);
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= kLatencyBuckets.size(); ++b) {
      cumulative += load(latency_buckets_[k][b]);
      std::string le = b < kLatencyBuckets.size() ? absl::StrFormat("%g", kLatencyBuckets[b])
                                                  : std::string("+Inf");
      absl::StrAppend(&out, "kolo_collective_latency_seconds_bucket{op=\"",
                      CollectiveKindName(kind), "\",le=\"", le, "\"} ", cumulative, "\n");
    }
    absl::StrAppend(&out, "kolo_collective_latency_seconds_sum{op=\"", CollectiveKindName(kind),
                    "\"} ", absl::StrFormat("%.9f", load(latency_sum_ns_[k]) * 1e-9), "\n");
    absl::StrAppend(&out, "kolo_collective_latency_seconds_count{op=\"", CollectiveKindName(kind),
                    "\"} ", load(latency_count_[k]), "\n");
  }
  absl::StrAppend(&out,
                  "# HELP kolo_stalls_total Stall reports (a tensor waited past the warning).\n"
                  "# TYPE kolo_stalls_total counter\n"
                  "kolo_stalls_total ",
                  load(stalls_), "\n");
  absl::StrAppend(&out,
                  "# HELP kolo_sessions Attached client sessions.\n"
                  "# TYPE kolo_sessions gauge\n"
                  "kolo_sessions ",
                  sessions_ ? sessions_() : 0, "\n",
                  "# HELP kolo_jobs Jobs with at least one attached rank.\n"
                  "# TYPE kolo_jobs gauge\n"
                  "kolo_jobs ",
                  jobs_ ? jobs_() : 0, "\n");
  return out;
}

}  // namespace kolo::daemon
