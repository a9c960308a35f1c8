// Data-parallel training of the example's Mlp: each rank trains on its shard
// of the data, and every step the ranks average their gradients before the
// same Adam update, so all ranks hold the same parameters throughout.
//
// Per job:
//   1. Every rank builds the model; rank 0's initial parameters are broadcast.
// Per epoch:
//   2. Each rank takes its shard of a fresh, seeded permutation (data_shard.h).
//   3. Per step: forward/backward into the gradient tensors, average them
//      across ranks (all four submitted, then all waited on), Adam step with
//      learning rate base_learning_rate * size.
//   4. The mean train loss is averaged across ranks; the test set is split
//      contiguously among the ranks and the correct counts are summed, so
//      every rank reports the same accuracy on the whole test set.
//
// Thread-safety: used by one thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "examples/fashion_mnist/adam.h"
#include "examples/fashion_mnist/gradient_averager.h"
#include "examples/fashion_mnist/idx_reader.h"
#include "examples/fashion_mnist/mlp.h"

namespace kolo::fashion_mnist {

struct TrainerOptions {
  int batch_size = 128;  // Per rank.
  uint64_t seed = 42;
  int hidden = 128;
  // Scaled by the number of ranks, as the global batch grows with them.
  double base_learning_rate = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-7;
};

struct EpochStats {
  int epoch = 0;
  int64_t steps = 0;
  int64_t global_images = 0;       // Trained on by all ranks together.
  double mean_train_loss = 0.0;    // Over all ranks' examples.
  double test_accuracy = 0.0;      // On the whole test set.
  double train_seconds = 0.0;      // This rank's wall time for step 3.
  double images_per_second = 0.0;  // global_images / train_seconds.
};

class Trainer {
 public:
  // Builds the model and broadcasts rank 0's parameters (step 1).
  // `averager`, `train` and `test` must outlive the Trainer. INVALID_ARGUMENT
  // for a bad option or a training set with fewer examples than ranks.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainerOptions& options,
                                                         GradientAverager* averager,
                                                         const Dataset* train, const Dataset* test);

  // Trains one epoch (numbered from 0) and evaluates; steps 2-4.
  absl::StatusOr<EpochStats> RunEpoch(int epoch);

  // Fraction of the whole test set classified correctly; every rank
  // evaluates its part and the counts are summed.
  absl::StatusOr<double> Evaluate();

  uint64_t WeightsChecksum() const { return model_.ParametersChecksum(); }
  Mlp& model() { return model_; }

 private:
  Trainer(const TrainerOptions& options, GradientAverager* averager, const Dataset* train,
          const Dataset* test);

  std::vector<NamedTensor> Named(const std::string& prefix, const MlpTensors& tensors) const;

  const TrainerOptions options_;
  GradientAverager* const averager_;
  const Dataset* const train_;
  const Dataset* const test_;
  Mlp model_;
  Adam adam_;
  MlpTensors grads_;  // Storage from averager_->AllocateGradient.
  std::vector<float> x_;
  std::vector<uint8_t> labels_;
};

}  // namespace kolo::fashion_mnist
