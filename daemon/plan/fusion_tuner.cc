#include "daemon/plan/fusion_tuner.h"

#include <algorithm>
#include <utility>

namespace kolo::daemon::plan {
namespace {

constexpr uint64_t kSmallestFused = uint64_t{64} << 10;

std::vector<uint64_t> CandidatesOf(uint64_t start, uint64_t bound) {
  std::vector<uint64_t> c = {0, std::min(start, bound), bound};
  for (uint64_t t = kSmallestFused; t < bound; t *= 2) c.push_back(t);
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

std::vector<double> PointsOf(size_t n) {
  std::vector<double> x(n, 0.0);
  for (size_t i = 0; i < n && n > 1; ++i) x[i] = static_cast<double>(i) / (n - 1);
  return x;
}

size_t IndexOf(const std::vector<uint64_t>& candidates, uint64_t t) {
  return static_cast<size_t>(std::find(candidates.begin(), candidates.end(), t) -
                             candidates.begin());
}

}  // namespace

FusionTuner::FusionTuner(AutotuneSettings settings, uint64_t start, uint64_t bound)
    : settings_(settings),
      candidates_(CandidatesOf(start, bound)),
      threshold_(std::min(start, bound)),
      optimizer_(PointsOf(candidates_.size()), settings.noise),
      start_index_(IndexOf(candidates_, std::min(start, bound))),
      current_(start_index_) {}

void FusionTuner::Planned(const std::string& name, uint64_t bytes, absl::Time now) {
  absl::MutexLock l(&mu_);
  if (done_) return;
  if (marker_.empty()) {
    marker_ = name;
    start_ = now;
  } else if (name == marker_ && ++steps_ >= settings_.steps_per_sample) {
    EndSample(now);
    if (done_) return;
    marker_ = name;
    start_ = now;
  }
  bytes_ += bytes;
}

void FusionTuner::EndSample(absl::Time now) {
  TunerSample s;
  s.index = static_cast<uint32_t>(samples_.size());
  s.fusion_threshold_bytes = candidates_[current_];
  s.steps = steps_;
  s.seconds = absl::ToDoubleSeconds(now - start_);
  s.score = s.seconds > 0 ? static_cast<double>(bytes_) / s.seconds : 0;
  s.warmup = samples_.size() < settings_.warmup_samples;
  samples_.push_back(s);
  bytes_ = 0;
  steps_ = 0;
  if (confirm_left_ > 0) {
    confirm_sum_[current_ == best_ ? 0 : 1] += s.score;
    if (--confirm_left_ > 0) {
      current_ = current_ == best_ ? start_index_ : best_;
    } else {
      current_ = confirm_sum_[0] >= kConfirmMargin * confirm_sum_[1] ? best_ : start_index_;
      done_ = true;
    }
  } else if (!s.warmup) {
    optimizer_.Observe(current_, s.score);
    if (optimizer_.observations() < settings_.max_samples) {
      current_ = optimizer_.Next();
    } else {
      best_ = optimizer_.Best();
      if (best_ == start_index_) {
        current_ = best_;
        done_ = true;
      } else {
        confirm_left_ = 2 * kConfirmSamples;
        current_ = best_;
      }
    }
  }
  threshold_.store(candidates_[current_], std::memory_order_relaxed);
}

TunerReport FusionTuner::Report(uint32_t since) const {
  absl::MutexLock l(&mu_);
  TunerReport r;
  for (size_t i = since; i < samples_.size(); ++i) r.samples.push_back(samples_[i]);
  r.total = static_cast<uint32_t>(samples_.size());
  r.fusion_threshold_bytes = candidates_[current_];
  r.done = done_;
  return r;
}

}  // namespace kolo::daemon::plan
