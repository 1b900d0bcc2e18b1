// Tests of examples/data/index_permutation.h and sampler.h: the permutation is a
// bijection for every size (primes, powers of two, 1), the same in every run and build
// (pinned values), and the Sampler visits each training window once per epoch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "examples/data/index_permutation.h"
#include "examples/data/sampler.h"
#include "examples/data/window_space.h"
#include "runtime/error.h"

namespace etr::data {
namespace {

const uint64_t kSizes[] = {1,  2,  3,  4,   5,   7,   8,    13,   16,   17,
                           31, 64, 97, 255, 256, 257, 1000, 1021, 4096, 65537};

TEST(IndexPermutation, IsABijectionForEverySize) {
  for (uint64_t n : kSizes) {
    for (uint64_t key : {uint64_t{0}, uint64_t{1}, uint64_t{0xdeadbeef}, ~uint64_t{0}}) {
      const IndexPermutation p(n, key);
      std::vector<bool> hit(n, false);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t j = p(i);
        ASSERT_LT(j, n) << "size " << n << " key " << key;
        ASSERT_FALSE(hit[j]) << "size " << n << " key " << key << ": " << j << " twice";
        hit[j] = true;
        ASSERT_EQ(p.inverse(j), i);
      }
    }
  }
}

TEST(IndexPermutation, EmptyAndOutOfRange) {
  const IndexPermutation empty(0, 5);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_THROW(empty(0), InvalidArgument);
  const IndexPermutation p(10, 5);
  EXPECT_THROW(p(10), InvalidArgument);
  EXPECT_THROW(p.inverse(10), InvalidArgument);
  EXPECT_THROW(IndexPermutation(IndexPermutation::kMaxSize + 1, 0), InvalidArgument);
  // The largest size works (and is fast: a few Feistel rounds per index).
  const IndexPermutation big(IndexPermutation::kMaxSize, 9);
  for (uint64_t i : {uint64_t{0}, uint64_t{1}, IndexPermutation::kMaxSize - 1})
    EXPECT_EQ(big.inverse(big(i)), i);
}

TEST(IndexPermutation, KeysGiveDifferentShuffledOrders) {
  const uint64_t n = 1000;
  const IndexPermutation a(n, 1), b(n, 2), a2(n, 1);
  uint64_t same = 0, fixed = 0, a_equal = 0;
  for (uint64_t i = 0; i < n; ++i) {
    same += a(i) == b(i);
    fixed += a(i) == i;
    a_equal += a(i) == a2(i);
  }
  EXPECT_EQ(a_equal, n);  // deterministic
  EXPECT_LT(same, 20u);   // a random pair agrees in about 1 place
  EXPECT_LT(fixed, 20u);  // not close to the identity
  // Neighbouring indices land far apart (no affine pattern).
  uint64_t close = 0;
  for (uint64_t i = 0; i + 1 < n; ++i)
    close += (a(i) > a(i + 1) ? a(i) - a(i + 1) : a(i + 1) - a(i)) < 5;
  EXPECT_LT(close, 30u);
}

// The values a resumed job depends on: if this test fails, the sample order changed and
// checkpoints of earlier builds would continue with different data.
TEST(IndexPermutation, ValuesArePinned) {
  const IndexPermutation p(1000, 42);
  const std::vector<uint64_t> got = {p(0), p(1), p(2), p(3), p(999)};
  EXPECT_EQ(got, (std::vector<uint64_t>{200, 805, 271, 536, 252}));
  EXPECT_EQ(mix64(0), 0xE220A8397B1DCDAFULL);  // splitmix64's first output for seed 0
}

TEST(Sampler, EachEpochVisitsEveryWindowOnce) {
  for (uint64_t windows : {1, 2, 5, 17, 97, 1000}) {
    const WindowSpace space{0, windows * 8 + 1, 8, 8};  // exactly `windows` windows
    ASSERT_EQ(space.count(), windows);
    const Sampler s(space, 7);
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      std::set<uint64_t> offsets;
      for (uint64_t i = 0; i < windows; ++i) {
        const uint64_t g = epoch * windows + i;
        EXPECT_EQ(s.epoch(g), epoch);
        const uint64_t off = s.sample(g);
        EXPECT_EQ(off % 8, 0u);
        EXPECT_LE(off + 9, space.end);
        offsets.insert(off);
      }
      EXPECT_EQ(offsets.size(), windows) << "epoch " << epoch;
    }
  }
}

TEST(Sampler, EpochsAndSeedsHaveDifferentOrders) {
  const WindowSpace space{0, 100 * 16 + 1, 16, 16};
  const Sampler s1(space, 1), s1b(space, 1), s2(space, 2);
  uint64_t same_epoch = 0, same_seed = 0;
  for (uint64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(s1.sample(i), s1b.sample(i));
    same_epoch += s1.window(i) == s1.window(100 + i);
    same_seed += s1.window(i) == s2.window(i);
  }
  EXPECT_LT(same_epoch, 10u);
  EXPECT_LT(same_seed, 10u);
}

TEST(Sampler, BatchOfSamplesMatchesOneByOne) {
  const WindowSpace space{100, 100 + 37 * 5 + 1, 5, 5};
  const Sampler s(space, 3);
  std::vector<uint64_t> offsets(90);
  s.samples(20, offsets);
  for (size_t i = 0; i < offsets.size(); ++i) EXPECT_EQ(offsets[i], s.sample(20 + i));
  EXPECT_GE(*std::min_element(offsets.begin(), offsets.end()), 100u);
}

TEST(Sampler, GatherCopiesEachSamplesWindow) {
  std::vector<uint16_t> tokens(200);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i);
  const DataSplit split = split_windows(tokens.size(), 6, 0.2);
  const Sampler s(split.train, 4);
  const uint64_t count = 5, first = 30;
  std::vector<int32_t> in(count * 6), out(count * 6);
  s.gather(tokens, first, count, in, out);
  for (uint64_t i = 0; i < count; ++i) {
    const auto off = static_cast<int32_t>(s.sample(first + i));
    for (uint64_t t = 0; t < 6; ++t) {
      EXPECT_EQ(in[i * 6 + t], off + static_cast<int32_t>(t));
      EXPECT_EQ(out[i * 6 + t], off + static_cast<int32_t>(t) + 1);
    }
  }
  std::vector<int32_t> small(count * 6 - 1);
  EXPECT_THROW(s.gather(tokens, first, count, small, out), InvalidArgument);
  EXPECT_THROW(s.gather(std::span<const uint16_t>(tokens).first(50), first, count, in, out),
               InvalidArgument);
}

TEST(Sampler, NeedsAWindow) {
  EXPECT_THROW(Sampler(WindowSpace{0, 8, 8, 8}, 1), ConfigError);  // 8 tokens < 9
}

TEST(Sampler, PositionToString) {
  DataPosition p{.step = 3, .samples_seen = 96, .seed = 7};
  p.advance(32);
  EXPECT_EQ(to_string(p), "step 4, samples 128, seed 7");
}

}  // namespace
}  // namespace etr::data
