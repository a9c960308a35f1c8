// Bayesian optimisation over a fixed list of candidate points in [0, 1]:
// a Gaussian process (squared-exponential kernel, length scale 0.25, unit
// signal variance; the observed scores scaled to zero mean and unit
// variance, `noise` added to the kernel's diagonal) models the score, and
// the next point to measure is the candidate of the largest expected
// improvement over the best score seen (ties: the lowest candidate).
// Nothing random: the same observations give the same choice.
//
// Thread-safety: not thread-safe; its owner serializes calls.
#pragma once

#include <cstddef>
#include <vector>

namespace kolo::daemon::plan {

class BayesianOptimizer {
 public:
  // `candidates` not empty, each in [0, 1].
  BayesianOptimizer(std::vector<double> candidates, double noise);

  void Observe(size_t candidate, double score);
  // The candidate to measure next.
  size_t Next() const;
  // The observed candidate where the model's mean is largest (the first
  // candidate when nothing was observed): noisy samples are smoothed by
  // their neighbours and by repeats.
  size_t Best() const;

  // The model at candidate `c`, in units of the scaled scores.
  struct Posterior {
    double mean = 0;
    double stddev = 1;
  };
  Posterior At(size_t c) const;
  size_t observations() const { return observed_.size(); }

 private:
  const std::vector<double> candidates_;
  const double noise_;
  std::vector<size_t> observed_;  // candidate index of each observation
  std::vector<double> scores_;
};

}  // namespace kolo::daemon::plan
