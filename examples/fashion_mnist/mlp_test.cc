#include "examples/fashion_mnist/mlp.h"

#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "examples/fashion_mnist/adam.h"
#include "gtest/gtest.h"

namespace kolo::fashion_mnist {
namespace {

constexpr MlpShape kTiny{.input = 6, .hidden = 5, .classes = 3};

// Gradient storage shaped like `shape`'s parameters.
struct GradStorage {
  explicit GradStorage(const MlpShape& shape) {
    for (const TensorSpec& spec : MlpTensorSpecs(shape)) {
      data.emplace_back(spec.num_elements(), 0.0f);
    }
  }
  MlpTensors tensors() { return MlpTensors{data[0], data[1], data[2], data[3]}; }
  std::vector<std::vector<float>> data;
};

// A fixed batch with about a third of the inputs exactly zero, as in images.
void MakeBatch(const MlpShape& shape, int batch, uint32_t seed, std::vector<float>& x,
               std::vector<uint8_t>& labels) {
  std::mt19937 rng(seed);
  x.resize(batch * shape.input);
  labels.resize(batch);
  for (float& v : x) {
    const uint32_t r = rng();
    v = (r % 3 == 0) ? 0.0f : static_cast<float>(r % 1000) / 1000.0f;
  }
  for (uint8_t& l : labels) l = rng() % shape.classes;
}

TEST(MlpTest, SpecsNameAndShapeTheFourTensors) {
  const auto specs = MlpTensorSpecs(MlpShape{});
  EXPECT_EQ(specs[0].name, "dense/kernel");
  EXPECT_EQ(specs[0].shape, (std::vector<int64_t>{784, 128}));
  EXPECT_EQ(specs[1].name, "dense/bias");
  EXPECT_EQ(specs[1].shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(specs[2].name, "dense_1/kernel");
  EXPECT_EQ(specs[2].shape, (std::vector<int64_t>{128, 10}));
  EXPECT_EQ(specs[3].name, "dense_1/bias");
  EXPECT_EQ(specs[3].shape, (std::vector<int64_t>{10}));
}

TEST(MlpTest, GlorotInitIsBoundedAndSeeded) {
  Mlp a(MlpShape{});
  Mlp b(MlpShape{});
  a.InitGlorotUniform(1);
  b.InitGlorotUniform(1);
  EXPECT_EQ(a.ParametersChecksum(), b.ParametersChecksum());
  b.InitGlorotUniform(2);
  EXPECT_NE(a.ParametersChecksum(), b.ParametersChecksum());
  const float limit = std::sqrt(6.0f / (784 + 128));
  for (float v : a.parameters().w1) {
    ASSERT_LE(std::abs(v), limit);
  }
  for (float v : a.parameters().b1) ASSERT_EQ(v, 0.0f);
}

TEST(MlpTest, BackwardMatchesFiniteDifferences) {
  constexpr int kBatch = 4;
  Mlp model(kTiny);
  model.InitGlorotUniform(11);
  // Non-zero biases so their gradients are exercised off the initial point.
  for (float& v : model.parameters().b1) v = 0.05f;
  for (float& v : model.parameters().b2) v = -0.1f;
  std::vector<float> x;
  std::vector<uint8_t> labels;
  MakeBatch(kTiny, kBatch, 5, x, labels);

  GradStorage grads(kTiny);
  const double loss = model.ForwardBackward(x.data(), labels.data(), kBatch, grads.tensors());
  EXPECT_NEAR(loss, model.Loss(x.data(), labels.data(), kBatch), 1e-9);

  constexpr float kEps = 1e-3f;
  const auto params = model.parameters().all();
  const auto analytic = grads.tensors().all();
  int checked = 0;
  for (int t = 0; t < kNumMlpTensors; ++t) {
    for (size_t i = 0; i < params[t].size(); ++i) {
      const float saved = params[t][i];
      params[t][i] = saved + kEps;
      const double up = model.Loss(x.data(), labels.data(), kBatch);
      params[t][i] = saved - kEps;
      const double down = model.Loss(x.data(), labels.data(), kBatch);
      params[t][i] = saved;
      const double numeric = (up - down) / (2 * kEps);
      EXPECT_NEAR(analytic[t][i], numeric, 2e-3 + 1e-2 * std::abs(numeric))
          << "tensor " << t << " element " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6 * 5 + 5 + 5 * 3 + 3);
}

TEST(MlpTest, AdamFirstStepsMatchHandComputation) {
  AdamOptions options{.learning_rate = 0.1, .beta1 = 0.9, .beta2 = 0.999, .epsilon = 1e-7};
  Adam adam(options, {2});
  std::vector<float> p = {1.0f, 1.0f};
  std::vector<float> g = {0.5f, -2.0f};
  const std::span<float> ps[] = {p};
  const std::span<float> gs[] = {g};

  // Step 1: m = 0.1 g, v = 0.001 g^2 and lr_t = 0.1 sqrt(0.001) / 0.1, so
  // lr_t m / sqrt(v) = 0.1 sign(g): each element moves by the learning rate
  // against its gradient (up to epsilon).
  adam.Step(ps, gs);
  EXPECT_NEAR(p[0], 0.9f, 1e-5);
  EXPECT_NEAR(p[1], 1.1f, 1e-5);

  // Step 2 with a different gradient, against the formulas in double.
  const double g1[] = {0.5, -2.0};
  const double g2[] = {-1.0, 0.25};
  g = {-1.0f, 0.25f};
  adam.Step(ps, gs);
  const double lr_t = 0.1 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.9 * 0.9);
  const double start[] = {0.9, 1.1};
  for (int i = 0; i < 2; ++i) {
    const double m = 0.9 * (0.1 * g1[i]) + 0.1 * g2[i];
    const double v = 0.999 * (0.001 * g1[i] * g1[i]) + 0.001 * g2[i] * g2[i];
    const double expected = start[i] - lr_t * m / (std::sqrt(v) + 1e-7);
    EXPECT_NEAR(p[i], expected, 1e-5) << "element " << i;
  }
  EXPECT_EQ(adam.steps(), 2);
}

TEST(MlpTest, LossDecreasesUnderAdam) {
  constexpr int kBatch = 16;
  Mlp model(kTiny);
  model.InitGlorotUniform(3);
  std::vector<float> x;
  std::vector<uint8_t> labels;
  MakeBatch(kTiny, kBatch, 9, x, labels);
  GradStorage grads(kTiny);
  std::vector<size_t> sizes;
  for (const auto& d : grads.data) sizes.push_back(d.size());
  Adam adam(AdamOptions{.learning_rate = 0.01}, sizes);

  const double initial = model.Loss(x.data(), labels.data(), kBatch);
  double previous = initial;
  for (int step = 0; step < 200; ++step) {
    const double loss = model.ForwardBackward(x.data(), labels.data(), kBatch, grads.tensors());
    if (step < 5) {
      EXPECT_LT(loss, previous + 1e-9) << "step " << step;
    }
    previous = loss;
    const auto params = model.parameters().all();
    const auto g = grads.tensors().all();
    adam.Step(params, g);
  }
  EXPECT_LT(model.Loss(x.data(), labels.data(), kBatch), initial * 0.5);
}

TEST(MlpTest, CountCorrectUsesArgmax) {
  Mlp model(MlpShape{.input = 2, .hidden = 2, .classes = 2});
  MlpTensors p = model.parameters();
  // Identity network: logits = relu(x).
  p.w1[0] = 1;
  p.w1[3] = 1;
  p.w2[0] = 1;
  p.w2[3] = 1;
  const float x[] = {1.0f, 0.0f, 0.0f, 1.0f, 0.2f, 0.9f};
  const uint8_t labels[] = {0, 0, 1};
  EXPECT_EQ(model.CountCorrect(x, labels, 3), 2);
}

}  // namespace
}  // namespace kolo::fashion_mnist
