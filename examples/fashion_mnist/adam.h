// Adam over a fixed list of float tensors, in the form whose epsilon is added
// after the square root of the uncorrected second moment:
//
//   m   <- beta1 m + (1 - beta1) g
//   v   <- beta2 v + (1 - beta2) g^2
//   lr_t = lr sqrt(1 - beta2^t) / (1 - beta1^t)
//   p   <- p - lr_t m / (sqrt(v) + epsilon)
//
// With data-parallel training every rank applies the same averaged gradient
// to the same parameters, so the ranks' parameters stay bitwise equal.
//
// Thread-safety: used by one thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kolo::fashion_mnist {

struct AdamOptions {
  double learning_rate = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-7;
};

class Adam {
 public:
  // `sizes[i]` is the element count of tensor i; Step's spans must match.
  Adam(const AdamOptions& options, std::vector<size_t> sizes);

  // Applies one update; params[i] and grads[i] must have sizes[i] elements.
  void Step(std::span<const std::span<float>> params, std::span<const std::span<float>> grads);

  int64_t steps() const { return steps_; }

 private:
  AdamOptions options_;
  std::vector<std::vector<float>> m_;
  std::vector<std::vector<float>> v_;
  int64_t steps_ = 0;
};

}  // namespace kolo::fashion_mnist
