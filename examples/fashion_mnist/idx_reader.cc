#include "examples/fashion_mnist/idx_reader.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "examples/fashion_mnist/gzip_reader.h"

namespace kolo::fashion_mnist {
namespace {

constexpr int64_t kFashionMnistSide = 28;

uint32_t BigEndianU32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Checks the header of an idx file with `num_dims` dimensions and returns
// them. `bytes` must hold at least the header; the payload length is checked
// against the product of the dimensions.
absl::StatusOr<std::vector<int64_t>> ParseIdxHeader(const std::string& path,
                                                    const std::vector<uint8_t>& bytes,
                                                    uint32_t expected_magic, int num_dims) {
  const size_t header_bytes = 4 * (1 + static_cast<size_t>(num_dims));
  if (bytes.size() < header_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: truncated idx header: %d bytes, need %d",
                                                      path, bytes.size(), header_bytes));
  }
  const uint32_t magic = BigEndianU32(bytes.data());
  if (magic != expected_magic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: bad idx magic 0x%08x, expected 0x%08x", path, magic, expected_magic));
  }
  std::vector<int64_t> dims;
  // Each dimension is below 2^32 and there are at most 3, so the product of
  // two fits int64 and a check per step keeps the whole product bounded.
  uint64_t payload = 1;
  for (int d = 0; d < num_dims; ++d) {
    const uint32_t dim = BigEndianU32(bytes.data() + 4 * (1 + d));
    if (dim == 0) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: idx dimension %d is 0", path, d));
    }
    payload *= dim;
    if (payload > (uint64_t{1} << 40)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: idx dimensions are implausibly large", path));
    }
    dims.push_back(dim);
  }
  const uint64_t actual = bytes.size() - header_bytes;
  if (actual != payload) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: idx payload is %s: header says %d bytes, file has %d", path,
        actual < payload ? "truncated" : "longer than its header", payload, actual));
  }
  return dims;
}

}  // namespace

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path) {
  KOLO_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadGzipFile(path));
  KOLO_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ParseIdxHeader(path, bytes, kIdxImagesMagic, 3));
  IdxImages images;
  images.count = dims[0];
  images.rows = dims[1];
  images.cols = dims[2];
  images.pixels.assign(bytes.begin() + 16, bytes.end());
  return images;
}

absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path) {
  KOLO_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadGzipFile(path));
  KOLO_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ParseIdxHeader(path, bytes, kIdxLabelsMagic, 1));
  (void)dims;
  return std::vector<uint8_t>(bytes.begin() + 8, bytes.end());
}

absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path, int64_t limit) {
  KOLO_ASSIGN_OR_RETURN(IdxImages images, ReadIdxImages(images_path));
  KOLO_ASSIGN_OR_RETURN(std::vector<uint8_t> labels, ReadIdxLabels(labels_path));
  if (static_cast<int64_t>(labels.size()) != images.count) {
    return absl::InvalidArgumentError(absl::StrFormat("%s holds %d labels but %s holds %d images",
                                                      labels_path, labels.size(), images_path,
                                                      images.count));
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= kNumClasses) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: label %d of example %d is outside [0, %d)", labels_path, labels[i], i, kNumClasses));
    }
  }
  Dataset data;
  data.count = images.count;
  data.rows = images.rows;
  data.cols = images.cols;
  data.pixels = std::move(images.pixels);
  data.labels = std::move(labels);
  if (limit > 0 && limit < data.count) {
    data.count = limit;
    data.pixels.resize(limit * data.pixels_per_image());
    data.labels.resize(limit);
  }
  return data;
}

absl::StatusOr<FashionMnist> LoadFashionMnist(const std::string& dir, int64_t limit_train) {
  auto file = [&dir](const char* name) { return absl::StrCat(dir, "/", name); };
  FashionMnist result;
  KOLO_ASSIGN_OR_RETURN(result.train,
                        LoadIdxDataset(file("train-images-idx3-ubyte.gz"),
                                       file("train-labels-idx1-ubyte.gz"), limit_train));
  KOLO_ASSIGN_OR_RETURN(result.test, LoadIdxDataset(file("t10k-images-idx3-ubyte.gz"),
                                                    file("t10k-labels-idx1-ubyte.gz")));
  for (const Dataset* d : {&result.train, &result.test}) {
    if (d->rows != kFashionMnistSide || d->cols != kFashionMnistSide) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: images are %dx%d, Fashion-MNIST's are %dx%d",
                          d == &result.train ? file("train-images-idx3-ubyte.gz")
                                             : file("t10k-images-idx3-ubyte.gz"),
                          d->rows, d->cols, kFashionMnistSide, kFashionMnistSide));
    }
  }
  return result;
}

}  // namespace kolo::fashion_mnist
