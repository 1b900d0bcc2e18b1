// Tests of parallel/share_balancer.h (throughput-proportional shares) and
// parallel/memory_model.h (the fit search), against independent arithmetic.
#include "parallel/share_balancer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "parallel/memory_model.h"
#include "runtime/error.h"

namespace etr {
namespace {

TEST(ProportionalShares, SumToTheBatchGiveEachOneAndFollowTheWeights) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    const size_t n = 1 + rng() % 6;
    const uint64_t B = n + rng() % 200;
    std::vector<double> w(n);
    for (double& x : w) x = 0.1 + (rng() % 1000) / 100.0;
    const std::vector<uint64_t> s = proportional_shares(B, w);
    ASSERT_EQ(std::accumulate(s.begin(), s.end(), uint64_t{0}), B);
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    for (size_t r = 0; r < n; ++r) {
      ASSERT_GE(s[r], 1u);
      // Within one sample (plus the one each is given first) of the exact proportion.
      const double exact = 1 + static_cast<double>(B - n) * w[r] / total;
      ASSERT_LT(std::fabs(static_cast<double>(s[r]) - exact), 1.0 + 1e-9) << trial;
    }
  }
  EXPECT_EQ(proportional_shares(12, {2.0, 1.0}), (std::vector<uint64_t>{8, 4}));
  EXPECT_THROW(proportional_shares(1, {1.0, 1.0}), InvalidArgument);
  EXPECT_THROW(proportional_shares(4, {1.0, 0.0}), InvalidArgument);
}

TEST(ShareBalancer, GivesAHalfSpeedRankHalfTheShareOfTheOthers) {
  ShareBalancer b(3, 0.1, 3, 2);
  const std::vector<uint64_t> even{8, 8, 8};
  // Rank 1 runs at half the speed: its 8 samples take twice as long.
  b.observe(even, {0.10, 0.20, 0.10});
  EXPECT_FALSE(b.propose(even).has_value());  // warming up
  b.observe(even, {0.10, 0.20, 0.10});
  const auto p = b.propose(even);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, (std::vector<uint64_t>{10, 5, 9}));  // 24 in the ratio 2:1:2, rounded
  // Measured at the new shares, the rates are the same: the shares stay.
  b.observe(*p, {1.0, 1.0, 0.9});
  b.observe(*p, {1.0, 1.0, 0.9});
  EXPECT_FALSE(b.propose(*p).has_value());
}

TEST(ShareBalancer, HysteresisIgnoresSmallDifferencesAndBadSteps) {
  ShareBalancer b(2, 0.1, 1, 1);  // each step's rate as it is
  const std::vector<uint64_t> even{10, 10};
  b.observe(even, {1.0, 1.05});  // 5 % apart: a share would move by less than 10 %
  EXPECT_FALSE(b.propose(even).has_value());
  b.observe(even, {1.0, 0.0});  // a step without a time is ignored
  EXPECT_FALSE(b.propose(even).has_value());
  b.observe(even, {1.0, 1.5});
  EXPECT_EQ(*b.propose(even), (std::vector<uint64_t>{12, 8}));
  EXPECT_THROW(b.observe({1}, {1.0}), InvalidArgument);
  EXPECT_THROW(ShareBalancer(2, 0.1, 0, 1), InvalidArgument);
}

// A rank's rate is the median of its last 3 steps, the first proposal after 3. One slow step (the
// 60 % slower one of a rank that lost it to something else) moves nothing, where a mean of the
// window would have moved the shares (20 -> 11.6 / 8.4); the same slowness in 2 of the last 3 steps
// does.
TEST(ShareBalancer, OneSlowStepMovesNothingAPersistentlySlowRankDoes) {
  ShareBalancer b(2, 0.1, 3, 3);
  const std::vector<uint64_t> even{10, 10};
  b.observe(even, {1.0, 1.6});
  EXPECT_FALSE(b.propose(even).has_value());  // warming up
  b.observe(even, {1.0, 1.0});
  EXPECT_FALSE(b.propose(even).has_value());  // warming up
  b.observe(even, {1.0, 1.0});
  EXPECT_FALSE(b.propose(even).has_value());
  EXPECT_DOUBLE_EQ(b.rates()[1], 10.0);  // median of 6.25, 10, 10
  b.observe(even, {1.0, 1.6});
  EXPECT_FALSE(b.propose(even).has_value());  // 10, 10, 6.25: still 10
  b.observe(even, {1.0, 1.6});
  EXPECT_DOUBLE_EQ(b.rates()[1], 6.25);  // 10, 6.25, 6.25
  // 20 in the ratio 10 : 6.25: one each, then 18 x (0.615, 0.385) = 11.08, 6.92 -> 12, 8.
  EXPECT_EQ(*b.propose(even), (std::vector<uint64_t>{12, 8}));
}

// The defaults (a window of 5): a rank whose speed wanders between 1 and 1/2 of the
// other's is not re-balanced on a median 1.6 times slower, since that difference does not
// stand out from its spread; the same rank steadily 1.6 times slower is.
TEST(ShareBalancer, ADifferenceWithinTheSpreadMovesNothing) {
  ShareBalancer b(2);
  const std::vector<uint64_t> even{10, 10};
  for (double t : {1.0, 2.0, 1.0, 2.0}) {
    b.observe(even, {1.0, t});
    EXPECT_FALSE(b.propose(even).has_value());  // warming up
  }
  b.observe(even, {1.0, 1.6});
  // Rates 10, 5, 10, 5, 6.25: median 6.25; deviations 3.75, 1.25, 3.75, 1.25, 0: their
  // median 1.25, x 1.4826 / 6.25 = 29.7 %. The shares would move 10 -> 12 / 8 (20 %).
  EXPECT_DOUBLE_EQ(b.rates()[1], 6.25);
  EXPECT_NEAR(b.spread(), 1.4826 * 1.25 / 6.25, 1e-12);
  EXPECT_FALSE(b.propose(even).has_value());
  b.observe(even, {1.0, 1.6});
  EXPECT_FALSE(b.propose(even).has_value());  // 5, 10, 5, 6.25, 6.25: the same spread
  b.observe(even, {1.0, 1.6});
  EXPECT_DOUBLE_EQ(b.spread(), 0.0);  // 10, 5, 6.25, 6.25, 6.25: most steps agree
  EXPECT_EQ(*b.propose(even), (std::vector<uint64_t>{12, 8}));
}

TEST(MemoryModel, LargestFittingIsTheBruteForceAnswer) {
  // Fixed 100 bytes, activations 7 b + (recompute ? 0 : 3 b^2 / 4): grows with b.
  const MemoryModel m({{"state", 100}}, [](int64_t b, bool rc) {
    return static_cast<size_t>(7 * b + (rc ? 0 : 3 * b * b / 4));
  });
  for (size_t budget : {50u, 106u, 107u, 200u, 1000u, 100000u}) {
    for (double margin : {0.0, 0.1, 0.5}) {
      for (bool rc : {false, true}) {
        int64_t brute = 0;
        for (int64_t b = 1; b <= 64; ++b) {
          if (static_cast<double>(m.peak(b, rc)) <= (1 - margin) * static_cast<double>(budget))
            brute = b;
        }
        EXPECT_EQ(m.largest_fitting(budget, margin, 64, rc), brute) << budget << " " << margin;
      }
    }
  }
  EXPECT_EQ(m.peak(4, false), 100u + 28u + 12u);
  EXPECT_EQ(m.dominant(1, false), "state");
  EXPECT_EQ(m.dominant(64, false), "activations");
  const std::vector<std::string> table = m.plan_table(1000, 0.0, 64, true);
  ASSERT_GE(table.size(), 4u);
  EXPECT_NE(table.back().find("with activation recomputation: 64"), std::string::npos)
      << table.back();
}

}  // namespace
}  // namespace etr
