#include "daemon/plan/bayesian_optimizer.h"

#include <cmath>
#include <set>

#include "gtest/gtest.h"

namespace kolo::daemon::plan {
namespace {

std::vector<double> Grid(size_t n) {
  std::vector<double> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<double>(i) / (n - 1);
  return x;
}

TEST(BayesianOptimizer, FindsThePeakOfASmoothScoreInFewSamples) {
  const std::vector<double> x = Grid(12);
  auto score = [&](size_t c) { return 100.0 - 300.0 * (x[c] - 0.62) * (x[c] - 0.62); };
  BayesianOptimizer bo(x, 0.01);
  size_t next = 0;
  std::set<size_t> tried;
  for (int i = 0; i < 8; ++i) {
    bo.Observe(next, score(next));
    tried.insert(next);
    next = bo.Next();
  }
  // The best of the grid is index 7 (x = 0.636), found without trying all.
  EXPECT_EQ(bo.Best(), 7u);
  EXPECT_LT(tried.size(), x.size());
}

TEST(BayesianOptimizer, ExploresAwayFromASingleObservation) {
  BayesianOptimizer bo(Grid(8), 0.8);
  bo.Observe(7, 10.0);
  const size_t next = bo.Next();
  EXPECT_NE(next, 7u);
  EXPECT_LT(bo.At(0).mean + 1e-9, 1.0);
  EXPECT_GT(bo.At(0).stddev, bo.At(7).stddev);
}

TEST(BayesianOptimizer, BestTrustsRepeatsOverOneLuckySample) {
  BayesianOptimizer bo(Grid(12), 0.8);
  EXPECT_EQ(bo.Best(), 0u);
  // Candidate 11 measured five times at about 10; candidate 0, far away,
  // once at 10.4.
  for (double s : {10.0, 9.8, 10.1, 9.9, 10.2}) bo.Observe(11, s);
  bo.Observe(5, 6.0);
  bo.Observe(0, 10.4);
  EXPECT_EQ(bo.Best(), 11u);
  // Without noise the model believes every sample: the lucky one wins.
  BayesianOptimizer exact(Grid(12), 1e-6);
  for (double s : {10.0, 9.8, 10.1, 9.9, 10.2}) exact.Observe(11, s);
  exact.Observe(5, 6.0);
  exact.Observe(0, 10.4);
  EXPECT_EQ(exact.Best(), 0u);
}

TEST(BayesianOptimizer, SameObservationsSameChoice) {
  BayesianOptimizer a(Grid(10), 0.8), b(Grid(10), 0.8);
  for (auto [c, s] : {std::pair{3, 2.0}, {9, 1.0}, {0, 1.5}}) {
    a.Observe(c, s);
    b.Observe(c, s);
  }
  EXPECT_EQ(a.Next(), b.Next());
  EXPECT_TRUE(std::isfinite(a.At(5).mean));
}

}  // namespace
}  // namespace kolo::daemon::plan
