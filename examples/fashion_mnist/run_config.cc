#include "examples/fashion_mnist/run_config.h"

#include <memory>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, data, "/usr/share/datasets/fashion-mnist",
          "Directory holding the four Fashion-MNIST idx .gz files.");
ABSL_FLAG(int, epochs, 5, "Passes over the training set.");
ABSL_FLAG(int, batch_size, 128, "Examples per step on each rank.");
ABSL_FLAG(uint64_t, seed, 42, "Seeds the initial weights and each epoch's shuffle.");
ABSL_FLAG(int64_t, limit_train, 0, "Use only the first N training examples (0: all).");

namespace kolo::fashion_mnist {

absl::StatusOr<RunConfig> RunConfigFromFlags() {
  RunConfig config;
  config.data_dir = absl::GetFlag(FLAGS_data);
  config.epochs = absl::GetFlag(FLAGS_epochs);
  config.limit_train = absl::GetFlag(FLAGS_limit_train);
  config.trainer.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.trainer.seed = absl::GetFlag(FLAGS_seed);
  if (config.epochs < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--epochs must be >= 0, got %d", config.epochs));
  }
  if (config.limit_train < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--limit_train must be >= 0, got %d", config.limit_train));
  }
  if (config.trainer.batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--batch_size must be > 0, got %d", config.trainer.batch_size));
  }
  return config;
}

absl::Status RunTraining(const RunConfig& config, const FashionMnist& data,
                         GradientAverager& averager, std::FILE* out) {
  const int rank = averager.rank();
  const int size = averager.size();
  if (rank == 0) {
    absl::FPrintF(out,
                  "fashion_mnist: %d rank(s), %d train / %d test examples, "
                  "batch %d per rank, learning rate %g\n",
                  size, data.train.count, data.test.count, config.trainer.batch_size,
                  config.trainer.base_learning_rate * size);
    std::fflush(out);
  }
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                        Trainer::Create(config.trainer, &averager, &data.train, &data.test));
  for (int epoch = 0; epoch < config.epochs; ++epoch) {
    KOLO_ASSIGN_OR_RETURN(EpochStats stats, trainer->RunEpoch(epoch));
    if (rank == 0) {
      absl::FPrintF(out,
                    "epoch %d/%d: train_loss %.4f  test_accuracy %.4f  "
                    "%.0f images/s (%d images in %.2fs, %d steps)\n",
                    epoch + 1, config.epochs, stats.mean_train_loss, stats.test_accuracy,
                    stats.images_per_second, stats.global_images, stats.train_seconds, stats.steps);
      std::fflush(out);
    }
  }
  absl::FPrintF(out, "rank %d/%d weights checksum fnv1a64=%016x\n", rank, size,
                trainer->WeightsChecksum());
  std::fflush(out);
  return absl::OkStatus();
}

}  // namespace kolo::fashion_mnist
