// A GradientAverager for a job of one rank: every collective is the
// identity. Gradient storage is ordinary heap memory.
//
// Thread-safety: used by one thread at a time.
#pragma once

#include <deque>
#include <span>
#include <vector>

#include "examples/fashion_mnist/gradient_averager.h"

namespace kolo::fashion_mnist {

class LocalAverager final : public GradientAverager {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::StatusOr<std::span<float>> AllocateGradient(const std::string& name,
                                                    const std::vector<int64_t>& shape) override;
  absl::Status BroadcastParameters(std::span<const NamedTensor> params) override;
  absl::Status AverageGradients(std::span<const NamedTensor> grads) override;
  absl::StatusOr<double> AverageScalar(const std::string& name, double value) override;
  absl::StatusOr<double> SumScalar(const std::string& name, double value) override;

 private:
  // A deque so earlier spans stay valid as storage is added.
  std::deque<std::vector<float>> storage_;
};

}  // namespace kolo::fashion_mnist
