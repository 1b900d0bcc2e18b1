// Tests of parallel/pipeline_partition.h: balance_partition against a brute-force search
// over every contiguous split (n = 1..9, parts = 1..n, random and tied costs) and against
// an independent dynamic program for larger n; heavy embedding and head layers; the
// explicit "3,2,2" form and its errors; part costs and the log line.
#include "parallel/pipeline_partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace etr {
namespace {

// Every split of n layers into `parts` non-empty contiguous ranges, as boundaries.
std::vector<std::vector<int>> all_splits(int n, int parts) {
  std::vector<std::vector<int>> out;
  std::vector<int> bounds{0};
  std::function<void()> extend = [&] {
    const int k = static_cast<int>(bounds.size()) - 1;  // parts placed so far
    if (k == parts - 1) {
      bounds.push_back(n);
      out.push_back(bounds);
      bounds.pop_back();
      return;
    }
    for (int b = bounds.back() + 1; b <= n - (parts - 1 - k); ++b) {
      bounds.push_back(b);
      extend();
      bounds.pop_back();
    }
  };
  extend();
  return out;
}

double max_part(const std::vector<double>& costs, const std::vector<int>& bounds) {
  const std::vector<double> c = part_costs(costs, bounds);
  return *std::max_element(c.begin(), c.end());
}

double brute_force_min_max(const std::vector<double>& costs, int parts) {
  double best = std::numeric_limits<double>::infinity();
  for (const auto& b : all_splits(static_cast<int>(costs.size()), parts)) {
    best = std::min(best, max_part(costs, b));
  }
  return best;
}

void expect_valid(const std::vector<int>& b, int n, int parts) {
  ASSERT_EQ(b.size(), static_cast<size_t>(parts) + 1);
  EXPECT_EQ(b.front(), 0);
  EXPECT_EQ(b.back(), n);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]) << "boundary " << i;
}

// For every n in 1..9 and parts in 1..n, `trials` cost vectors from make_cost.
void check_against_brute_force(const std::function<double(std::mt19937&)>& make_cost, int trials) {
  std::mt19937 rng(20240611);
  for (int n = 1; n <= 9; ++n) {
    for (int parts = 1; parts <= n; ++parts) {
      for (int t = 0; t < trials; ++t) {
        std::vector<double> costs(static_cast<size_t>(n));
        for (double& c : costs) c = make_cost(rng);
        SCOPED_TRACE("n=" + std::to_string(n) + " parts=" + std::to_string(parts) +
                     " trial=" + std::to_string(t));
        const std::vector<int> b = balance_partition(costs, parts);
        expect_valid(b, n, parts);
        EXPECT_EQ(max_part(costs, b), brute_force_min_max(costs, parts));
        EXPECT_EQ(balance_partition(costs, parts), b);
      }
    }
  }
}

TEST(PipelinePartition, MatchesBruteForceWithRandomCosts) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  // Wide magnitudes make the additions round, which the exact comparison must survive.
  check_against_brute_force([&](std::mt19937& rng) { return u(rng) * std::pow(10.0, 6 * u(rng)); },
                            12);
}

TEST(PipelinePartition, MatchesBruteForceWithTiedIntegerCosts) {
  std::uniform_int_distribution<int> small(0, 3);
  check_against_brute_force([&](std::mt19937& rng) { return double(small(rng)); }, 12);
  check_against_brute_force([](std::mt19937&) { return 1.0; }, 1);
  check_against_brute_force([](std::mt19937&) { return 0.0; }, 1);
}

// An independent O(n^2 parts) dynamic program over the same in-order part sums.
double dp_min_max(const std::vector<double>& costs, int parts) {
  const int n = static_cast<int>(costs.size());
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> prev(n + 1, inf);
  prev[0] = 0.0;
  for (int k = 1; k <= parts; ++k) {
    std::vector<double> cur(n + 1, inf);
    for (int i = 0; i < n; ++i) {
      if (prev[i] == inf) continue;
      double sum = 0.0;
      for (int j = i + 1; j <= n; ++j) {
        sum += costs[j - 1];
        cur[j] = std::min(cur[j], std::max(prev[i], sum));
      }
    }
    prev = cur;
  }
  return prev[n];
}

TEST(PipelinePartition, MatchesDynamicProgramForLargerModels) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.5, 3.0);
  for (const int n : {40, 150}) {
    std::vector<double> costs(static_cast<size_t>(n));
    for (double& c : costs) c = u(rng);
    for (const int parts : {1, 2, 3, 7, 16, n / 3, n - 1, n}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " parts=" + std::to_string(parts));
      const std::vector<int> b = balance_partition(costs, parts);
      expect_valid(b, n, parts);
      EXPECT_EQ(max_part(costs, b), dp_min_max(costs, parts));
    }
  }
}

TEST(PipelinePartition, HeavyEmbeddingAndHeadGetStagesOfTheirOwn) {
  // Embedding and head each cost as much as six blocks: alone is the only optimum.
  std::vector<double> gpt(14, 1.0);
  gpt.front() = 6.0;
  gpt.back() = 6.0;
  EXPECT_EQ(balance_partition(gpt, 4), (std::vector<int>{0, 1, 7, 13, 14}));
  // Here the blocks between could be split 1+5 or 2+4 as well; they are shared evenly.
  const std::vector<double> heavy_ends{10, 1, 1, 1, 1, 1, 1, 10};
  EXPECT_EQ(balance_partition(heavy_ends, 4), (std::vector<int>{0, 1, 4, 7, 8}));
  // A GPT-2-like head (5.5 blocks): the head alone, the rest 5 | 4 | 4.
  std::vector<double> head(14, 1.0);
  head.back() = 5.5;
  EXPECT_EQ(balance_partition(head, 4), (std::vector<int>{0, 5, 9, 13, 14}));
}

TEST(PipelinePartition, LargeModelsAreValidAndFast) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.0, 2.0);
  std::vector<double> costs(10000);
  for (double& c : costs) c = u(rng);
  for (const int parts : {1, 64, 3333, 10000}) {
    expect_valid(balance_partition(costs, parts), 10000, parts);
  }
}

// Runs f and returns what it threw as ConfigError ("" when nothing was thrown).
template <typename F>
std::string config_error(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(PipelinePartition, RefusesImpossibleSplitsAndBadCosts) {
  const std::vector<double> three{1, 2, 3};
  const std::string too_many = config_error([&] { balance_partition(three, 4); });
  EXPECT_TRUE(contains(too_many, "cannot split 3 layers into 4 pipeline stages")) << too_many;
  EXPECT_TRUE(contains(too_many, "each stage needs at least one layer")) << too_many;
  const std::string none = config_error([&] { balance_partition(three, 0); });
  EXPECT_TRUE(contains(none, "into 0 pipeline stages")) << none;
  EXPECT_TRUE(contains(config_error([] { balance_partition({}, 1); }), "cannot split 0 layers"));

  const std::string negative = config_error([] { balance_partition(std::vector{1.0, -1.0}, 1); });
  EXPECT_TRUE(contains(negative, "layer 1 has cost -1, which is negative")) << negative;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::string not_a_number = config_error([&] { balance_partition(std::vector{nan}, 1); });
  EXPECT_TRUE(contains(not_a_number, "layer 0 has cost nan, which is not finite")) << not_a_number;
  const double inf = std::numeric_limits<double>::infinity();
  const std::string infinite = config_error([&] { balance_partition(std::vector{1.0, inf}, 2); });
  EXPECT_TRUE(contains(infinite, "layer 1 has cost inf, which is not finite")) << infinite;
}

TEST(PipelinePartitionParse, AcceptsLayerCountsWithWhitespace) {
  EXPECT_EQ(parse_partition("1,2,3", 6, 3), (std::vector<int>{0, 1, 3, 6}));
  EXPECT_EQ(parse_partition(" 2, 2 ,2", 6, 3), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(parse_partition("\t7 ", 7, 1), (std::vector<int>{0, 7}));
}

TEST(PipelinePartitionParse, NamesWhatIsWrong) {
  struct Case {
    const char* text;
    int n_layers;
    const char* problem;
  };
  const Case cases[] = {
      {"1,2", 3, "lists 2 stages but the pipeline has 3"},
      {"1,2,3,4", 10, "lists 4 stages but the pipeline has 3"},
      {"0,3,3", 6, "gives stage 0 0 layers; every stage needs at least one layer"},
      {"a,b,c", 3, "has the entry \"a\", which is not a whole number of layers"},
      {"1,-1,2", 2, "has the entry \"-1\", which is not a whole number"},
      {"1,,2", 3, "has an empty entry at position 2"},
      {"", 3, "has an empty entry at position 1"},
      {"1,2,", 3, "has an empty entry at position 3"},
      {"1,2 3,4", 10, "has the entry \"2 3\""},
      {"1,99999999999,1", 3, "more layers than the limit"},
      {"1,2,3", 7, "covers 6 layers but the model has 7"},
      {"2,2,2", 5, "covers 6 layers but the model has 5"},
  };
  for (const Case& c : cases) {
    const std::string what = config_error([&] { parse_partition(c.text, c.n_layers, 3); });
    EXPECT_TRUE(contains(what, "the pipeline partition \"" + std::string(c.text) + "\""))
        << c.text << ": " << what;
    EXPECT_TRUE(contains(what, c.problem)) << c.text << ": " << what;
  }
}

TEST(PipelinePartition, PartCostsAndDescription) {
  const std::vector<double> costs{3, 1, 1, 1, 1, 2, 4};
  const std::vector<int> bounds{0, 1, 5, 7};
  EXPECT_EQ(part_costs(costs, bounds), (std::vector<double>{3, 4, 6}));
  EXPECT_EQ(describe_partition(bounds), "layers 0 | 1-4 | 5-6");
  EXPECT_EQ(describe_partition(std::vector<int>{0, 3, 5, 7}), "layers 0-2 | 3-4 | 5-6");
  EXPECT_THROW(part_costs(costs, std::vector<int>{0, 1, 6}), InvalidArgument);
  EXPECT_THROW(part_costs(costs, std::vector<int>{0, 3, 3, 7}), InvalidArgument);
  EXPECT_THROW(describe_partition(std::vector<int>{0}), InvalidArgument);
}

}  // namespace
}  // namespace etr
