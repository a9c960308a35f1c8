#include "examples/fashion_mnist/trainer.h"

#include <sys/stat.h>

#include <random>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "examples/fashion_mnist/idx_reader.h"
#include "examples/fashion_mnist/local_averager.h"
#include "gtest/gtest.h"

namespace kolo::fashion_mnist {
namespace {

// An in-process rendezvous for `size` rank threads: each collective waits
// until every rank has contributed, then hands every rank the same result.
//
// Thread-safety: safe from the `size` rank threads.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size) {}

  int size() const { return size_; }

  // Elementwise sum of every rank's `values` (equal lengths), in rank order
  // so the result is the same bits on every rank.
  std::vector<double> AllSum(int rank, const std::vector<double>& values) {
    absl::MutexLock lock(&mu_);
    const int64_t generation = generation_;
    if (arrived_ == 0) contributions_.assign(size_, {});
    contributions_[rank] = values;
    if (++arrived_ == size_) {
      result_.assign(values.size(), 0.0);
      for (const auto& c : contributions_) {
        for (size_t i = 0; i < c.size(); ++i) result_[i] += c[i];
      }
      arrived_ = 0;
      ++generation_;
      done_.SignalAll();
    } else {
      // The next round cannot complete before this rank joins it, so
      // result_ still holds this round's result when the wait ends.
      while (generation_ == generation) done_.Wait(&mu_);
    }
    return result_;
  }

 private:
  const int size_;
  absl::Mutex mu_;
  absl::CondVar done_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::vector<double>> contributions_ ABSL_GUARDED_BY(mu_);
  std::vector<double> result_ ABSL_GUARDED_BY(mu_);
};

// A GradientAverager for one rank of a ThreadGroup.
class ThreadGroupAverager final : public GradientAverager {
 public:
  ThreadGroupAverager(ThreadGroup* group, int rank) : group_(group), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  absl::StatusOr<std::span<float>> AllocateGradient(const std::string& name,
                                                    const std::vector<int64_t>& shape) override {
    return local_.AllocateGradient(name, shape);
  }
  absl::Status BroadcastParameters(std::span<const NamedTensor> params) override {
    for (const NamedTensor& p : params) {
      broadcast_names_.push_back(p.name);
      std::vector<double> mine(p.values.size(), 0.0);
      if (rank_ == 0) mine.assign(p.values.begin(), p.values.end());
      const std::vector<double> root = group_->AllSum(rank_, mine);
      for (size_t i = 0; i < root.size(); ++i) p.values[i] = root[i];
    }
    return absl::OkStatus();
  }
  absl::Status AverageGradients(std::span<const NamedTensor> grads) override {
    ++gradient_rounds_;
    for (const NamedTensor& g : grads) {
      const std::vector<double> sum =
          group_->AllSum(rank_, std::vector<double>(g.values.begin(), g.values.end()));
      for (size_t i = 0; i < sum.size(); ++i) {
        g.values[i] = static_cast<float>(sum[i] / size());
      }
    }
    return absl::OkStatus();
  }
  absl::StatusOr<double> AverageScalar(const std::string&, double value) override {
    return group_->AllSum(rank_, {value})[0] / size();
  }
  absl::StatusOr<double> SumScalar(const std::string&, double value) override {
    return group_->AllSum(rank_, {value})[0];
  }

  int gradient_rounds() const { return gradient_rounds_; }
  const std::vector<std::string>& broadcast_names() const { return broadcast_names_; }

 private:
  ThreadGroup* const group_;
  const int rank_;
  LocalAverager local_;  // Only for gradient storage.
  int gradient_rounds_ = 0;
  std::vector<std::string> broadcast_names_;
};

// 4x4 images of 10 classes: class c lights pixel c (plus c+6 for variety)
// over low noise with some exact zeros.
Dataset SyntheticData(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  Dataset d;
  d.count = count;
  d.rows = 4;
  d.cols = 4;
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t label = rng() % kNumClasses;
    d.labels.push_back(label);
    for (int k = 0; k < 16; ++k) {
      const uint32_t r = rng();
      uint8_t v = (r % 4 == 0) ? 0 : r % 60;
      if (k == label || k == label + 6) v = 200 + r % 56;
      d.pixels.push_back(v);
    }
  }
  return d;
}

TrainerOptions SmallOptions() { return TrainerOptions{.batch_size = 16, .seed = 5, .hidden = 16}; }

TEST(TrainerTest, CreateRejectsBadOptions) {
  const Dataset train = SyntheticData(10, 1);
  LocalAverager averager;
  TrainerOptions options = SmallOptions();
  options.batch_size = 0;
  EXPECT_EQ(Trainer::Create(options, &averager, &train, &train).status().code(),
            absl::StatusCode::kInvalidArgument);

  const Dataset empty;
  EXPECT_EQ(Trainer::Create(SmallOptions(), &averager, &empty, &train).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TrainerTest, OneRankLearnsSyntheticData) {
  const Dataset train = SyntheticData(2000, 1);
  const Dataset test = SyntheticData(500, 2);
  LocalAverager averager;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(SmallOptions(), &averager, &train, &test);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<EpochStats> first = (*trainer)->RunEpoch(0);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<EpochStats> second = (*trainer)->RunEpoch(1);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->steps, 125);
  EXPECT_EQ(first->global_images, 2000);
  EXPECT_LT(second->mean_train_loss, first->mean_train_loss);
  EXPECT_GT(second->test_accuracy, 0.75);  // Chance is 0.1.
}

TEST(TrainerTest, TwoRanksStayInLockstep) {
  const Dataset train = SyntheticData(1001, 3);  // Odd: one example dropped.
  const Dataset test = SyntheticData(301, 4);    // Odd: unequal eval parts.
  constexpr int kRanks = 2;
  ThreadGroup group(kRanks);
  struct Result {
    absl::Status status;
    std::vector<EpochStats> epochs;
    uint64_t checksum = 0;
    int gradient_rounds = 0;
    std::vector<std::string> broadcast_names;
  };
  std::vector<Result> results(kRanks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      ThreadGroupAverager averager(&group, rank);
      Result& r = results[rank];
      absl::StatusOr<std::unique_ptr<Trainer>> trainer =
          Trainer::Create(SmallOptions(), &averager, &train, &test);
      if (!trainer.ok()) {
        r.status = trainer.status();
        return;
      }
      for (int epoch = 0; epoch < 3; ++epoch) {
        absl::StatusOr<EpochStats> stats = (*trainer)->RunEpoch(epoch);
        if (!stats.ok()) {
          r.status = stats.status();
          return;
        }
        r.epochs.push_back(*stats);
      }
      r.checksum = (*trainer)->WeightsChecksum();
      r.gradient_rounds = averager.gradient_rounds();
      r.broadcast_names = averager.broadcast_names();
    });
  }
  for (std::thread& t : threads) t.join();

  for (int rank = 0; rank < kRanks; ++rank) {
    ASSERT_TRUE(results[rank].status.ok()) << results[rank].status;
    ASSERT_EQ(results[rank].epochs.size(), 3u);
  }
  EXPECT_EQ(
      results[1].broadcast_names,
      (std::vector<std::string>{"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"}));
  // 500 examples per rank per epoch in batches of 16: 32 steps.
  EXPECT_EQ(results[0].gradient_rounds, 3 * 32);
  EXPECT_EQ(results[0].epochs[0].global_images, 1000);
  EXPECT_EQ(results[0].checksum, results[1].checksum);
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(results[0].epochs[e].mean_train_loss, results[1].epochs[e].mean_train_loss);
    EXPECT_EQ(results[0].epochs[e].test_accuracy, results[1].epochs[e].test_accuracy);
  }
  EXPECT_LT(results[0].epochs[2].mean_train_loss, results[0].epochs[0].mean_train_loss);
  EXPECT_GT(results[0].epochs[2].test_accuracy, 0.75);  // Chance is 0.1.
}

// The real data set, when this machine has it: a few thousand examples for a
// few epochs should already classify most of the full test set.
TEST(TrainerTest, LearnsFashionMnistSubset) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  struct stat st;
  if (stat(absl::StrCat(dir, "/train-images-idx3-ubyte.gz").c_str(), &st) != 0) {
    GTEST_SKIP() << "Fashion-MNIST is not installed at " << dir;
  }
  absl::StatusOr<FashionMnist> data = LoadFashionMnist(dir, 4000);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->train.count, 4000);
  ASSERT_EQ(data->test.count, 10000);
  LocalAverager averager;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(TrainerOptions{}, &averager, &data->train, &data->test);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EpochStats last;
  for (int epoch = 0; epoch < 3; ++epoch) {
    absl::StatusOr<EpochStats> stats = (*trainer)->RunEpoch(epoch);
    ASSERT_TRUE(stats.ok()) << stats.status();
    last = *stats;
  }
  EXPECT_LT(last.mean_train_loss, 0.7);
  EXPECT_GT(last.test_accuracy, 0.75);
}

}  // namespace
}  // namespace kolo::fashion_mnist
