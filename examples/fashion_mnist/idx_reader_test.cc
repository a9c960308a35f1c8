#include "examples/fashion_mnist/idx_reader.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::fashion_mnist {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(v >> 24);
  out.push_back(v >> 16);
  out.push_back(v >> 8);
  out.push_back(v);
}

std::vector<uint8_t> ImagesBytes(uint32_t count, uint32_t rows, uint32_t cols,
                                 uint32_t magic = kIdxImagesMagic) {
  std::vector<uint8_t> out;
  PutU32(out, magic);
  PutU32(out, count);
  PutU32(out, rows);
  PutU32(out, cols);
  for (uint32_t i = 0; i < count * rows * cols; ++i) out.push_back(i % 251);
  return out;
}

std::vector<uint8_t> LabelsBytes(uint32_t count, uint32_t magic = kIdxLabelsMagic) {
  std::vector<uint8_t> out;
  PutU32(out, magic);
  PutU32(out, count);
  for (uint32_t i = 0; i < count; ++i) out.push_back(i % kNumClasses);
  return out;
}

std::string WriteGz(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = TempPath(name);
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  if (!bytes.empty()) {
    EXPECT_EQ(gzwrite(f, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
  }
  EXPECT_EQ(gzclose(f), Z_OK);
  return path;
}

std::vector<uint8_t> ReadRaw(const std::string& path) {
  std::vector<uint8_t> bytes;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  int c;
  while ((c = std::fgetc(f)) != EOF) bytes.push_back(c);
  std::fclose(f);
  return bytes;
}

void WriteRaw(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

TEST(IdxReaderTest, ReadsValidFiles) {
  const std::string images = WriteGz("ok-images.gz", ImagesBytes(5, 3, 2));
  const std::string labels = WriteGz("ok-labels.gz", LabelsBytes(5));
  absl::StatusOr<Dataset> data = LoadIdxDataset(images, labels);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->count, 5);
  EXPECT_EQ(data->rows, 3);
  EXPECT_EQ(data->cols, 2);
  EXPECT_EQ(data->pixels_per_image(), 6);
  ASSERT_EQ(data->pixels.size(), 30u);
  EXPECT_EQ(data->pixels[7], 7);
  EXPECT_EQ(data->labels, (std::vector<uint8_t>{0, 1, 2, 3, 4}));
}

TEST(IdxReaderTest, LimitKeepsFirstExamples) {
  const std::string images = WriteGz("lim-images.gz", ImagesBytes(5, 2, 2));
  const std::string labels = WriteGz("lim-labels.gz", LabelsBytes(5));
  absl::StatusOr<Dataset> data = LoadIdxDataset(images, labels, 3);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->count, 3);
  EXPECT_EQ(data->pixels.size(), 12u);
  EXPECT_EQ(data->labels.size(), 3u);
  // A limit beyond the file keeps everything.
  data = LoadIdxDataset(images, labels, 100);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->count, 5);
}

TEST(IdxReaderTest, MissingFileIsNotFoundAndNamesPath) {
  const std::string path = TempPath("does-not-exist.gz");
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(images.status().message(), HasSubstr(path));
}

TEST(IdxReaderTest, BadMagic) {
  const std::string path = WriteGz("magic-images.gz", ImagesBytes(2, 2, 2, 0x00000801));
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(images.status().message(), HasSubstr(path));
  EXPECT_THAT(images.status().message(), HasSubstr("bad idx magic 0x00000801"));

  const std::string labels = WriteGz("magic-labels.gz", LabelsBytes(2, kIdxImagesMagic));
  EXPECT_THAT(ReadIdxLabels(labels).status().message(), HasSubstr("bad idx magic 0x00000803"));
}

TEST(IdxReaderTest, TruncatedHeader) {
  const std::string path = WriteGz("short-header.gz", {0, 0, 8, 3, 0, 0});
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_FALSE(images.ok());
  EXPECT_THAT(images.status().message(), HasSubstr("truncated idx header"));
  EXPECT_THAT(images.status().message(), HasSubstr(path));
}

TEST(IdxReaderTest, TruncatedPayload) {
  std::vector<uint8_t> bytes = ImagesBytes(4, 2, 2);
  bytes.resize(bytes.size() - 5);
  const std::string path = WriteGz("short-images.gz", bytes);
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(images.status().message(), HasSubstr("truncated: header says 16 bytes, file has 11"));
}

TEST(IdxReaderTest, TrailingBytes) {
  std::vector<uint8_t> bytes = LabelsBytes(3);
  bytes.push_back(1);
  const std::string path = WriteGz("long-labels.gz", bytes);
  EXPECT_THAT(ReadIdxLabels(path).status().message(), HasSubstr("longer than its header"));
}

TEST(IdxReaderTest, ZeroDimension) {
  const std::string path = WriteGz("zero-images.gz", ImagesBytes(3, 0, 2));
  EXPECT_THAT(ReadIdxImages(path).status().message(), HasSubstr("dimension 1 is 0"));
}

TEST(IdxReaderTest, CountMismatchNamesBothFiles) {
  const std::string images = WriteGz("mm-images.gz", ImagesBytes(5, 2, 2));
  const std::string labels = WriteGz("mm-labels.gz", LabelsBytes(4));
  absl::StatusOr<Dataset> data = LoadIdxDataset(images, labels);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(),
              HasSubstr(absl::StrCat(labels, " holds 4 labels but ", images, " holds 5 images")));
}

TEST(IdxReaderTest, LabelOutOfRange) {
  std::vector<uint8_t> bytes = LabelsBytes(3);
  bytes.back() = 10;
  const std::string images = WriteGz("range-images.gz", ImagesBytes(3, 1, 1));
  const std::string labels = WriteGz("range-labels.gz", bytes);
  EXPECT_THAT(LoadIdxDataset(images, labels).status().message(),
              HasSubstr("label 10 of example 2 is outside [0, 10)"));
}

TEST(IdxReaderTest, TruncatedGzipStreamIsDataLoss) {
  const std::string good = WriteGz("cut-src.gz", ImagesBytes(50, 28, 28));
  std::vector<uint8_t> compressed = ReadRaw(good);
  compressed.resize(compressed.size() / 2);
  const std::string path = TempPath("cut-images.gz");
  WriteRaw(path, compressed);
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), absl::StatusCode::kDataLoss) << images.status();
  EXPECT_THAT(images.status().message(), HasSubstr(path));
}

TEST(IdxReaderTest, CorruptGzipStreamIsDataLoss) {
  const std::string good = WriteGz("bad-src.gz", ImagesBytes(50, 28, 28));
  std::vector<uint8_t> compressed = ReadRaw(good);
  for (size_t i = 20; i < compressed.size() - 10; i += 7) compressed[i] ^= 0x5a;
  const std::string path = TempPath("bad-images.gz");
  WriteRaw(path, compressed);
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), absl::StatusCode::kDataLoss) << images.status();
}

TEST(IdxReaderTest, FashionMnistDirWithMissingFileNamesIt) {
  const std::string dir = TempPath("fm");
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", dir).c_str()), 0);
  absl::StatusOr<FashionMnist> data = LoadFashionMnist(dir);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(data.status().message(), HasSubstr(absl::StrCat(dir, "/train-images-idx3-ubyte.gz")));
}

TEST(IdxReaderTest, FashionMnistRejectsWrongImageSize) {
  const std::string dir = TempPath("fm-size");
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", dir).c_str()), 0);
  WriteGz("fm-size/train-images-idx3-ubyte.gz", ImagesBytes(4, 2, 2));
  WriteGz("fm-size/train-labels-idx1-ubyte.gz", LabelsBytes(4));
  WriteGz("fm-size/t10k-images-idx3-ubyte.gz", ImagesBytes(2, 2, 2));
  WriteGz("fm-size/t10k-labels-idx1-ubyte.gz", LabelsBytes(2));
  EXPECT_THAT(LoadFashionMnist(dir).status().message(),
              HasSubstr("images are 2x2, Fashion-MNIST's are 28x28"));
}

}  // namespace
}  // namespace kolo::fashion_mnist
