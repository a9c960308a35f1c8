#include "examples/fashion_mnist/adam.h"

#include <cassert>
#include <cmath>

namespace kolo::fashion_mnist {

Adam::Adam(const AdamOptions& options, std::vector<size_t> sizes) : options_(options) {
  for (size_t n : sizes) {
    m_.emplace_back(n, 0.0f);
    v_.emplace_back(n, 0.0f);
  }
}

void Adam::Step(std::span<const std::span<float>> params, std::span<const std::span<float>> grads) {
  assert(params.size() == m_.size() && grads.size() == m_.size());
  ++steps_;
  const double t = static_cast<double>(steps_);
  const float lr_t =
      static_cast<float>(options_.learning_rate * std::sqrt(1.0 - std::pow(options_.beta2, t)) /
                         (1.0 - std::pow(options_.beta1, t)));
  const float b1 = static_cast<float>(options_.beta1);
  const float b2 = static_cast<float>(options_.beta2);
  const float eps = static_cast<float>(options_.epsilon);
  for (size_t i = 0; i < m_.size(); ++i) {
    assert(params[i].size() == m_[i].size() && grads[i].size() == m_[i].size());
    float* __restrict p = params[i].data();
    const float* __restrict g = grads[i].data();
    float* __restrict m = m_[i].data();
    float* __restrict v = v_[i].data();
    for (size_t k = 0; k < m_[i].size(); ++k) {
      m[k] = b1 * m[k] + (1.0f - b1) * g[k];
      v[k] = b2 * v[k] + (1.0f - b2) * g[k] * g[k];
      p[k] -= lr_t * m[k] / (std::sqrt(v[k]) + eps);
    }
  }
}

}  // namespace kolo::fashion_mnist
