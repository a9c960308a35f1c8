#include "daemon/plan/bayesian_optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kolo::daemon::plan {
namespace {

constexpr double kLengthScale = 0.25;
constexpr double kExploration = 0.01;  // EI's margin, in scaled units
constexpr double kJitter = 1e-9;

double Kernel(double a, double b) {
  const double d = (a - b) / kLengthScale;
  return std::exp(-0.5 * d * d);
}

// Lower Cholesky factor of the symmetric positive definite n x n `a`
// (row-major), in place.
void Cholesky(std::vector<double>& a, size_t n) {
  for (size_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (size_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    d = std::sqrt(d > kJitter ? d : kJitter);
    a[j * n + j] = d;
    for (size_t i = j + 1; i < n; ++i) {
      double v = a[i * n + j];
      for (size_t k = 0; k < j; ++k) v -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = v / d;
    }
    for (size_t k = j + 1; k < n; ++k) a[j * n + k] = 0;
  }
}

// Solves L y = b (forward) for lower-triangular L.
std::vector<double> Forward(const std::vector<double>& l, size_t n, std::vector<double> b) {
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < i; ++k) b[i] -= l[i * n + k] * b[k];
    b[i] /= l[i * n + i];
  }
  return b;
}

// Solves L^T x = y (backward).
std::vector<double> Backward(const std::vector<double>& l, size_t n, std::vector<double> y) {
  for (size_t i = n; i-- > 0;) {
    for (size_t k = i + 1; k < n; ++k) y[i] -= l[k * n + i] * y[k];
    y[i] /= l[i * n + i];
  }
  return y;
}

double NormalPdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI); }
double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

}  // namespace

BayesianOptimizer::BayesianOptimizer(std::vector<double> candidates, double noise)
    : candidates_(std::move(candidates)), noise_(noise) {}

void BayesianOptimizer::Observe(size_t candidate, double score) {
  observed_.push_back(candidate);
  scores_.push_back(score);
}

BayesianOptimizer::Posterior BayesianOptimizer::At(size_t c) const {
  const size_t n = observed_.size();
  if (n == 0) return {};
  double mean = 0;
  for (double s : scores_) mean += s;
  mean /= static_cast<double>(n);
  double var = 0;
  for (double s : scores_) var += (s - mean) * (s - mean);
  const double scale = n > 1 && var > 0 ? std::sqrt(var / static_cast<double>(n)) : 1.0;
  std::vector<double> y(n);
  for (size_t i = 0; i < n; ++i) y[i] = (scores_[i] - mean) / scale;
  std::vector<double> k(n * n);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      k[i * n + j] = Kernel(candidates_[observed_[i]], candidates_[observed_[j]]);
    }
    k[i * n + i] += noise_ + kJitter;
  }
  Cholesky(k, n);
  const std::vector<double> alpha = Backward(k, n, Forward(k, n, y));
  std::vector<double> ks(n);
  for (size_t i = 0; i < n; ++i) ks[i] = Kernel(candidates_[c], candidates_[observed_[i]]);
  Posterior p;
  for (size_t i = 0; i < n; ++i) p.mean += ks[i] * alpha[i];
  const std::vector<double> v = Forward(k, n, ks);
  double explained = 0;
  for (double x : v) explained += x * x;
  const double variance = 1.0 - explained;
  p.stddev = std::sqrt(variance > 0 ? variance : 0);
  return p;
}

size_t BayesianOptimizer::Next() const {
  if (observed_.empty()) return 0;
  // The best scaled score seen is the best posterior mean at an observed
  // point (the scores are noisy).
  double best = -1e300;
  for (size_t o : observed_) best = std::max(best, At(o).mean);
  size_t next = 0;
  double next_ei = -1;
  for (size_t c = 0; c < candidates_.size(); ++c) {
    const Posterior p = At(c);
    double ei = 0;
    if (p.stddev > 1e-12) {
      const double z = (p.mean - best - kExploration) / p.stddev;
      ei = (p.mean - best - kExploration) * NormalCdf(z) + p.stddev * NormalPdf(z);
    }
    if (ei > next_ei + 1e-12) {
      next = c;
      next_ei = ei;
    }
  }
  return next;
}

size_t BayesianOptimizer::Best() const {
  // The model's mean, not the raw scores: one lucky sample of a candidate
  // measured once counts for less than a candidate measured often.
  size_t best = observed_.empty() ? 0 : observed_.front();
  double best_mean = -1e300;
  for (size_t o : observed_) {
    const double m = At(o).mean;
    if (m > best_mean + 1e-12) {
      best = o;
      best_mean = m;
    }
  }
  return best;
}

}  // namespace kolo::daemon::plan
