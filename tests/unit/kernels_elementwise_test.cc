// The elementwise CPU kernels (runtime/kernels/cpu/elementwise.h) against plain loops, on
// sizes around the threading grain (so both the one-thread and the split path run), and
// sum's fixed order: the sequential double sum, bit for bit.
#include "runtime/kernels/cpu/elementwise.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace etr::cpu {
namespace {

std::vector<float> random_vector(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

TEST(ElementwiseKernels, MatchPlainLoops) {
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{1} << 14, (int64_t{1} << 17) + 3}) {
    const std::vector<float> a = random_vector(n, 1), b = random_vector(n, 2);
    std::vector<float> out(n, 5.0f);
    fill(out.data(), 0.25f, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 0.25f) << n;
    copy(out.data(), a.data(), n);
    EXPECT_EQ(out, a) << n;
    add_inplace(out.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << n << " at " << i;
    double reference = 0;
    for (int64_t i = 0; i < n; ++i) reference += a[i];
    EXPECT_EQ(sum(a.data(), n), reference) << n;
  }
}

}  // namespace
}  // namespace etr::cpu
