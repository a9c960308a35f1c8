// The example's configuration, parsed once from the command line and passed
// down; and the training loop shared by the Kolo binary and the one-process
// local binary.
//
// Thread-safety: RunTraining uses its averager from the calling thread only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "examples/fashion_mnist/gradient_averager.h"
#include "examples/fashion_mnist/idx_reader.h"
#include "examples/fashion_mnist/trainer.h"

namespace kolo::fashion_mnist {

struct RunConfig {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int epochs = 5;
  int64_t limit_train = 0;  // 0: the whole training set.
  TrainerOptions trainer;
};

// Reads --data, --epochs, --batch_size, --seed and --limit_train; call after
// absl::ParseCommandLine. INVALID_ARGUMENT for out-of-range values.
absl::StatusOr<RunConfig> RunConfigFromFlags();

// Trains `config.epochs` epochs on `data`. Rank 0 writes one line per epoch to
// `out`; every rank writes its weight checksum at the end.
absl::Status RunTraining(const RunConfig& config, const FashionMnist& data,
                         GradientAverager& averager, std::FILE* out);

}  // namespace kolo::fashion_mnist
