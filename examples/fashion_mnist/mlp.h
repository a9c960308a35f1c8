// The example's model: Flatten -> Dense(hidden, ReLU) -> Dense(classes),
// trained with softmax cross-entropy on the logits. Forward and backward are
// plain loops ordered for cache locality (i-k-j matrix products) and skip
// zero inputs, which are about half of every Fashion-MNIST image.
//
// Parameters are four float tensors in a fixed order, named as the reference
// Keras-style model names them:
//   0 dense/kernel   [input, hidden]
//   1 dense/bias     [hidden]
//   2 dense_1/kernel [hidden, classes]
//   3 dense_1/bias   [classes]
//
// Thread-safety: an Mlp is used by one thread at a time (forward/backward
// share scratch buffers).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kolo::fashion_mnist {

struct MlpShape {
  int input = 784;
  int hidden = 128;
  int classes = 10;
};

inline constexpr int kNumMlpTensors = 4;

// Name and shape of each parameter tensor, in the order above.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t num_elements() const;
};
std::array<TensorSpec, kNumMlpTensors> MlpTensorSpecs(const MlpShape& shape);

// Four float tensors laid out as MlpTensorSpecs says; the spans do not own.
struct MlpTensors {
  std::span<float> w1;
  std::span<float> b1;
  std::span<float> w2;
  std::span<float> b2;

  std::array<std::span<float>, kNumMlpTensors> all() const { return {w1, b1, w2, b2}; }
};

class Mlp {
 public:
  // Parameters start at zero; call InitGlorotUniform or write parameters().
  explicit Mlp(const MlpShape& shape);

  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;

  const MlpShape& shape() const { return shape_; }

  // Kernels uniform in +-sqrt(6 / (fan_in + fan_out)), biases zero. The
  // stream depends only on `seed` (no library-defined distributions), so
  // every build draws the same values.
  void InitGlorotUniform(uint64_t seed);

  // Views of the parameters; valid as long as this Mlp.
  MlpTensors parameters();

  // One training step's math on `batch` examples: `x` is [batch, input],
  // `labels` [batch] with values in [0, classes). Overwrites `grads` (which
  // must have the parameter shapes) with the gradient of the mean loss and
  // returns that mean loss.
  double ForwardBackward(const float* x, const uint8_t* labels, int batch, const MlpTensors& grads);

  // Mean loss only (no gradient).
  double Loss(const float* x, const uint8_t* labels, int batch);

  // Number of examples whose largest logit is at their label.
  int64_t CountCorrect(const float* x, const uint8_t* labels, int batch);

  // FNV-1a (64-bit) over the bytes of the four parameter tensors in order;
  // equal on ranks whose parameters are bitwise equal.
  uint64_t ParametersChecksum() const;

 private:
  // Fills hidden_ (post-ReLU) and logits_ for `batch` rows of `x`.
  void Forward(const float* x, int batch);
  // Softmax cross-entropy over logits_; when `dlogits` is set, writes
  // d(mean loss)/d(logits) there. Returns the mean loss.
  double SoftmaxCrossEntropy(const uint8_t* labels, int batch, float* dlogits);
  void EnsureScratch(int batch);

  MlpShape shape_;
  std::vector<float> w1_, b1_, w2_, b2_;
  // Scratch, sized for the largest batch seen.
  std::vector<float> hidden_, logits_, dlogits_, dhidden_;
};

}  // namespace kolo::fashion_mnist
