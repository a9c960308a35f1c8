// Metrics: the daemon's counters and histograms, rendered in the Prometheus
// text exposition format. Updated once per response (not per byte or per
// slot), from executor threads.
//
// Thread-safety: thread-safe; counters are relaxed atomics, Render reads a
// consistent-enough snapshot.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {

class Metrics {
 public:
  // Latency buckets (seconds) of a collective, first submission to done.
  static constexpr std::array<double, 14> kLatencyBuckets = {
      5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 0.1, 1, 10, 60};

  // One response of `tensors` tensors of `kind`/`dtype`, `bytes` in all.
  void RecordResponse(CollectiveKind kind, DType dtype, int tensors, uint64_t bytes);
  // One tensor's latency, from its first submission to its completion.
  void RecordLatency(CollectiveKind kind, absl::Duration latency);
  void RecordError(CollectiveKind kind);
  void RecordStall() { stalls_.fetch_add(1, std::memory_order_relaxed); }

  // Gauges are read when rendering.
  void SetGauges(std::function<int()> sessions, std::function<int()> jobs) {
    sessions_ = std::move(sessions);
    jobs_ = std::move(jobs);
  }

  std::string Render() const;

 private:
  // Indexed by CollectiveKind value; 0 collects values outside the enum.
  static constexpr int kKinds = kMaxCollectiveKind + 1;
  static int KindIndex(CollectiveKind k) {
    return static_cast<uint32_t>(k) < kKinds ? static_cast<int>(k) : 0;
  }

  std::array<std::array<std::atomic<uint64_t>, kNumDTypes>, kKinds> tensors_{};
  std::array<std::array<std::atomic<uint64_t>, kNumDTypes>, kKinds> bytes_{};
  std::array<std::atomic<uint64_t>, kKinds> responses_{};
  std::array<std::atomic<uint64_t>, kKinds> errors_{};
  std::array<std::array<std::atomic<uint64_t>, kLatencyBuckets.size() + 1>, kKinds>
      latency_buckets_{};
  std::array<std::atomic<uint64_t>, kKinds> latency_count_{};
  std::array<std::atomic<uint64_t>, kKinds> latency_sum_ns_{};
  std::atomic<uint64_t> stalls_{0};
  std::function<int()> sessions_;
  std::function<int()> jobs_;
};

}  // namespace kolo::daemon
