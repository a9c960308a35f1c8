// Loads Fashion-MNIST (the MNIST idx format, gzip-compressed) and validates it
// before training sees a byte: magic numbers, dimensions, payload lengths,
// image/label count agreement and label range.
//
// idx layout (all integers big-endian):
//   images: u32 magic 0x00000803, u32 count, u32 rows, u32 cols,
//   count*rows*cols u8 labels: u32 magic 0x00000801, u32 count, count u8
//
// Thread-safety: the functions are reentrant; Dataset is a plain value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kolo::fashion_mnist {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;
inline constexpr int kNumClasses = 10;

// Images and their labels, row-major: example i's pixels are
// pixels[i * pixels_per_image() .. (i + 1) * pixels_per_image()).
struct Dataset {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> pixels;
  std::vector<uint8_t> labels;  // Each in [0, kNumClasses).

  int64_t pixels_per_image() const { return rows * cols; }
};

struct IdxImages {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> pixels;
};

// Reads an idx3 image file. INVALID_ARGUMENT (naming the path) for a wrong
// magic, zero dimensions, or a payload shorter or longer than the header says.
absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path);

// Reads an idx1 label file; same checks as ReadIdxImages.
absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path);

// Reads a matching image and label file. INVALID_ARGUMENT when the counts
// differ or a label is outside [0, kNumClasses). `limit` > 0 keeps only the
// first `limit` examples (all of them when the files hold fewer).
absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path, int64_t limit = 0);

struct FashionMnist {
  Dataset train;
  Dataset test;
};

// Loads the four standard files from `dir` (train-images-idx3-ubyte.gz,
// train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,
// t10k-labels-idx1-ubyte.gz). `limit_train` > 0 truncates the training set;
// the test set is always whole. Images must be 28x28.
absl::StatusOr<FashionMnist> LoadFashionMnist(const std::string& dir, int64_t limit_train = 0);

}  // namespace kolo::fashion_mnist
