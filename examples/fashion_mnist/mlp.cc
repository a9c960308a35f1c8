#include "examples/fashion_mnist/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace kolo::fashion_mnist {

int64_t TensorSpec::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::array<TensorSpec, kNumMlpTensors> MlpTensorSpecs(const MlpShape& s) {
  return {TensorSpec{"dense/kernel", {s.input, s.hidden}}, TensorSpec{"dense/bias", {s.hidden}},
          TensorSpec{"dense_1/kernel", {s.hidden, s.classes}},
          TensorSpec{"dense_1/bias", {s.classes}}};
}

Mlp::Mlp(const MlpShape& shape)
    : shape_(shape),
      w1_(static_cast<size_t>(shape.input) * shape.hidden, 0.0f),
      b1_(shape.hidden, 0.0f),
      w2_(static_cast<size_t>(shape.hidden) * shape.classes, 0.0f),
      b2_(shape.classes, 0.0f) {}

void Mlp::InitGlorotUniform(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto fill = [&rng](std::vector<float>& w, int fan_in, int fan_out) {
    const double limit = std::sqrt(6.0 / (fan_in + fan_out));
    for (float& v : w) {
      // 53 random bits -> [0, 1), then -> [-limit, limit).
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      v = static_cast<float>((2.0 * u - 1.0) * limit);
    }
  };
  fill(w1_, shape_.input, shape_.hidden);
  fill(w2_, shape_.hidden, shape_.classes);
  std::fill(b1_.begin(), b1_.end(), 0.0f);
  std::fill(b2_.begin(), b2_.end(), 0.0f);
}

MlpTensors Mlp::parameters() { return MlpTensors{w1_, b1_, w2_, b2_}; }

void Mlp::EnsureScratch(int batch) {
  const size_t b = static_cast<size_t>(batch);
  if (hidden_.size() < b * shape_.hidden) {
    hidden_.resize(b * shape_.hidden);
    dhidden_.resize(b * shape_.hidden);
  }
  if (logits_.size() < b * shape_.classes) {
    logits_.resize(b * shape_.classes);
    dlogits_.resize(b * shape_.classes);
  }
}

void Mlp::Forward(const float* x, int batch) {
  EnsureScratch(batch);
  const int in = shape_.input, hid = shape_.hidden, out = shape_.classes;
  for (int i = 0; i < batch; ++i) {
    float* __restrict h = hidden_.data() + static_cast<size_t>(i) * hid;
    const float* xi = x + static_cast<size_t>(i) * in;
    std::memcpy(h, b1_.data(), hid * sizeof(float));
    for (int k = 0; k < in; ++k) {
      const float a = xi[k];
      if (a == 0.0f) continue;
      const float* __restrict w = w1_.data() + static_cast<size_t>(k) * hid;
      for (int j = 0; j < hid; ++j) h[j] += a * w[j];
    }
    for (int j = 0; j < hid; ++j) h[j] = std::max(h[j], 0.0f);

    float* __restrict z = logits_.data() + static_cast<size_t>(i) * out;
    std::memcpy(z, b2_.data(), out * sizeof(float));
    for (int j = 0; j < hid; ++j) {
      const float a = h[j];
      if (a == 0.0f) continue;
      const float* __restrict w = w2_.data() + static_cast<size_t>(j) * out;
      for (int c = 0; c < out; ++c) z[c] += a * w[c];
    }
  }
}

double Mlp::SoftmaxCrossEntropy(const uint8_t* labels, int batch, float* dlogits) {
  const int out = shape_.classes;
  const double inv_batch = 1.0 / batch;
  double total = 0.0;
  for (int i = 0; i < batch; ++i) {
    const float* z = logits_.data() + static_cast<size_t>(i) * out;
    const float zmax = *std::max_element(z, z + out);
    double denom = 0.0;
    for (int c = 0; c < out; ++c) denom += std::exp(double{z[c]} - zmax);
    const double log_denom = std::log(denom);
    total += log_denom - (double{z[labels[i]]} - zmax);
    if (dlogits != nullptr) {
      float* d = dlogits + static_cast<size_t>(i) * out;
      for (int c = 0; c < out; ++c) {
        const double p = std::exp(double{z[c]} - zmax - log_denom);
        d[c] = static_cast<float>((p - (c == labels[i] ? 1.0 : 0.0)) * inv_batch);
      }
    }
  }
  return total * inv_batch;
}

double Mlp::ForwardBackward(const float* x, const uint8_t* labels, int batch,
                            const MlpTensors& grads) {
  Forward(x, batch);
  const double loss = SoftmaxCrossEntropy(labels, batch, dlogits_.data());
  const int in = shape_.input, hid = shape_.hidden, out = shape_.classes;

  float* __restrict gw1 = grads.w1.data();
  float* __restrict gb1 = grads.b1.data();
  float* __restrict gw2 = grads.w2.data();
  float* __restrict gb2 = grads.b2.data();
  std::fill(grads.w1.begin(), grads.w1.end(), 0.0f);
  std::fill(grads.b1.begin(), grads.b1.end(), 0.0f);
  std::fill(grads.w2.begin(), grads.w2.end(), 0.0f);
  std::fill(grads.b2.begin(), grads.b2.end(), 0.0f);

  for (int i = 0; i < batch; ++i) {
    const float* __restrict h = hidden_.data() + static_cast<size_t>(i) * hid;
    const float* __restrict dz = dlogits_.data() + static_cast<size_t>(i) * out;
    float* __restrict dh = dhidden_.data() + static_cast<size_t>(i) * hid;

    // Output layer: dW2 += h^T dz, db2 += dz, dh = (dz W2^T) masked by ReLU.
    for (int c = 0; c < out; ++c) gb2[c] += dz[c];
    for (int j = 0; j < hid; ++j) {
      const float a = h[j];
      if (a == 0.0f) {  // ReLU was inactive: no gradient flows back.
        dh[j] = 0.0f;
        continue;
      }
      float* __restrict g = gw2 + static_cast<size_t>(j) * out;
      const float* __restrict w = w2_.data() + static_cast<size_t>(j) * out;
      float s = 0.0f;
      for (int c = 0; c < out; ++c) {
        g[c] += a * dz[c];
        s += dz[c] * w[c];
      }
      dh[j] = s;
    }

    // Hidden layer: dW1 += x^T dh, db1 += dh.
    for (int j = 0; j < hid; ++j) gb1[j] += dh[j];
    const float* xi = x + static_cast<size_t>(i) * in;
    for (int k = 0; k < in; ++k) {
      const float a = xi[k];
      if (a == 0.0f) continue;
      float* __restrict g = gw1 + static_cast<size_t>(k) * hid;
      for (int j = 0; j < hid; ++j) g[j] += a * dh[j];
    }
  }
  return loss;
}

double Mlp::Loss(const float* x, const uint8_t* labels, int batch) {
  Forward(x, batch);
  return SoftmaxCrossEntropy(labels, batch, nullptr);
}

int64_t Mlp::CountCorrect(const float* x, const uint8_t* labels, int batch) {
  Forward(x, batch);
  const int out = shape_.classes;
  int64_t correct = 0;
  for (int i = 0; i < batch; ++i) {
    const float* z = logits_.data() + static_cast<size_t>(i) * out;
    if (std::max_element(z, z + out) - z == labels[i]) ++correct;
  }
  return correct;
}

uint64_t Mlp::ParametersChecksum() const {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const std::vector<float>* t : {&w1_, &b1_, &w2_, &b2_}) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(t->data());
    for (size_t i = 0; i < t->size() * sizeof(float); ++i) {
      hash ^= bytes[i];
      hash *= 0x100000001b3ULL;
    }
  }
  return hash;
}

}  // namespace kolo::fashion_mnist
