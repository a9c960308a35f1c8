#include "examples/fashion_mnist/trainer.h"

#include <algorithm>
#include <chrono>

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "examples/fashion_mnist/data_shard.h"

namespace kolo::fashion_mnist {
namespace {

MlpShape ShapeFor(const TrainerOptions& options, const Dataset& train) {
  return MlpShape{.input = static_cast<int>(train.pixels_per_image()),
                  .hidden = options.hidden,
                  .classes = kNumClasses};
}

std::vector<size_t> TensorSizes(const MlpShape& shape) {
  std::vector<size_t> sizes;
  for (const TensorSpec& spec : MlpTensorSpecs(shape)) {
    sizes.push_back(static_cast<size_t>(spec.num_elements()));
  }
  return sizes;
}

AdamOptions AdamFor(const TrainerOptions& options, int size) {
  return AdamOptions{.learning_rate = options.base_learning_rate * size,
                     .beta1 = options.beta1,
                     .beta2 = options.beta2,
                     .epsilon = options.epsilon};
}

}  // namespace

Trainer::Trainer(const TrainerOptions& options, GradientAverager* averager, const Dataset* train,
                 const Dataset* test)
    : options_(options),
      averager_(averager),
      train_(train),
      test_(test),
      model_(ShapeFor(options, *train)),
      adam_(AdamFor(options, averager->size()), TensorSizes(model_.shape())),
      x_(static_cast<size_t>(options.batch_size) * train->pixels_per_image()),
      labels_(options.batch_size) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerOptions& options,
                                                         GradientAverager* averager,
                                                         const Dataset* train,
                                                         const Dataset* test) {
  if (options.batch_size <= 0 || options.hidden <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "batch_size (%d) and hidden (%d) must be positive", options.batch_size, options.hidden));
  }
  if (train->count < averager->size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d training examples cannot be shared among %d ranks", train->count, averager->size()));
  }
  if (test->pixels_per_image() != train->pixels_per_image()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("test images have %d pixels, training images %d", test->pixels_per_image(),
                        train->pixels_per_image()));
  }
  std::unique_ptr<Trainer> trainer = absl::WrapUnique(new Trainer(options, averager, train, test));

  std::array<std::span<float>, kNumMlpTensors> grads;
  const auto specs = MlpTensorSpecs(trainer->model_.shape());
  for (int i = 0; i < kNumMlpTensors; ++i) {
    KOLO_ASSIGN_OR_RETURN(grads[i], averager->AllocateGradient(specs[i].name, specs[i].shape));
    if (static_cast<int64_t>(grads[i].size()) != specs[i].num_elements()) {
      return absl::InternalError(
          absl::StrFormat("gradient \"%s\": averager returned %d elements, need %d", specs[i].name,
                          grads[i].size(), specs[i].num_elements()));
    }
  }
  trainer->grads_ = MlpTensors{grads[0], grads[1], grads[2], grads[3]};

  // Every rank draws from the same seed, but only rank 0's draw counts: the
  // broadcast makes the ranks equal even if their draws would differ.
  trainer->model_.InitGlorotUniform(options.seed);
  KOLO_RETURN_IF_ERROR(
      averager->BroadcastParameters(trainer->Named("", trainer->model_.parameters())));
  return trainer;
}

std::vector<NamedTensor> Trainer::Named(const std::string& prefix,
                                        const MlpTensors& tensors) const {
  const auto specs = MlpTensorSpecs(model_.shape());
  const auto all = tensors.all();
  std::vector<NamedTensor> named;
  for (int i = 0; i < kNumMlpTensors; ++i) {
    named.push_back(NamedTensor{absl::StrCat(prefix, specs[i].name), specs[i].shape, all[i]});
  }
  return named;
}

absl::StatusOr<EpochStats> Trainer::RunEpoch(int epoch) {
  const int rank = averager_->rank();
  const int size = averager_->size();
  const std::vector<int64_t> shard = ShardForEpoch(train_->count, rank, size, options_.seed, epoch);
  const std::vector<NamedTensor> grads = Named("", grads_);
  const auto params = model_.parameters().all();
  const auto grad_spans = grads_.all();

  EpochStats stats;
  stats.epoch = epoch;
  double loss_sum = 0.0;  // Sum over this rank's examples.
  const auto start = std::chrono::steady_clock::now();
  for (size_t begin = 0; begin < shard.size(); begin += options_.batch_size) {
    const int batch = static_cast<int>(std::min<size_t>(options_.batch_size, shard.size() - begin));
    GatherBatch(*train_, std::span(shard).subspan(begin, batch), x_.data(), labels_.data());
    loss_sum += batch * model_.ForwardBackward(x_.data(), labels_.data(), batch, grads_);
    KOLO_RETURN_IF_ERROR(averager_->AverageGradients(grads));
    adam_.Step(params, grad_spans);
    ++stats.steps;
  }
  stats.train_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.global_images = static_cast<int64_t>(shard.size()) * size;
  stats.images_per_second = stats.train_seconds > 0 ? stats.global_images / stats.train_seconds : 0;

  // Shards are equal in size, so the mean of the ranks' means is the mean
  // over all examples.
  KOLO_ASSIGN_OR_RETURN(
      stats.mean_train_loss,
      averager_->AverageScalar("metric/train_loss", shard.empty() ? 0.0 : loss_sum / shard.size()));
  KOLO_ASSIGN_OR_RETURN(stats.test_accuracy, Evaluate());
  return stats;
}

absl::StatusOr<double> Trainer::Evaluate() {
  const int rank = averager_->rank();
  const int size = averager_->size();
  const int64_t begin = test_->count * rank / size;
  const int64_t end = test_->count * (rank + 1) / size;
  std::vector<int64_t> indices(options_.batch_size);
  int64_t correct = 0;
  for (int64_t i = begin; i < end; i += options_.batch_size) {
    const int batch = static_cast<int>(std::min<int64_t>(options_.batch_size, end - i));
    for (int b = 0; b < batch; ++b) indices[b] = i + b;
    GatherBatch(*test_, std::span(indices).first(batch), x_.data(), labels_.data());
    correct += model_.CountCorrect(x_.data(), labels_.data(), batch);
  }
  KOLO_ASSIGN_OR_RETURN(const double total,
                        averager_->SumScalar("metric/test_correct", static_cast<double>(correct)));
  return test_->count > 0 ? total / test_->count : 0.0;
}

}  // namespace kolo::fashion_mnist
