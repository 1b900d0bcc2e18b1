// ZeroPlan (parallel/zero_plan.h) and plan_buckets' ZeRO alignment: every bucket but a
// tail shorter than 16 N is a multiple of 16 N elements (N > 1), and block r of a bucket is the
// segment the ring allreduce sums at rank r (ring_segments, collectives/ring_common.h);
// the blocks of all ranks tile the buffer once; held() and norm_ranges() are sorted and
// the tail is counted by rank 0 only; sum_squares is the double-precision sum and does
// not depend on the number of threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "collectives/ring_common.h"
#include "parallel/zero_plan.h"
#include "runtime/error.h"
#include "runtime/kernels/cpu/threads.h"

namespace etr {
namespace {

ParamLayout layout() {
  ParamLayout l;
  l.add("emb", Shape{37, 5}, 0, true);
  l.add("a.w", Shape{130, 11}, 1, true);
  l.add("a.b", Shape{13}, 1, false);
  l.add("b.w", Shape{1001}, 2, true);
  l.add("head", Shape{7, 3}, 3, false);
  return l;
}

TEST(ZeroPlan, BlocksAreTheRingSegmentsAndTileTheBuffer) {
  const ParamLayout l = layout();
  for (int n = 1; n <= 5; ++n) {
    for (size_t first : {64u, 256u, 4000u}) {
      for (size_t cap : {64u, 1000u, 1u << 20}) {
        BucketOptions o{first, cap, true};
        const ZeroPlan plan(l, n, o);
        std::vector<int> owners(static_cast<size_t>(l.numel()), 0);
        for (size_t b = 0; b < plan.buckets().size(); ++b) {
          const Bucket& k = plan.buckets()[b];
          if (k.replicated) {
            EXPECT_EQ(k.begin, 0) << "only the tail is replicated";
            EXPECT_LT(k.numel(), 16 * n);
            for (int64_t i = k.begin; i < k.end; ++i) owners[i] += n;
            continue;
          }
          if (n > 1) {
            ASSERT_EQ(k.numel() % (16 * n), 0) << "bucket " << b << " at n " << n;
          }
          const std::vector<int64_t> seg = ring_segments(k.numel(), n, sizeof(float));
          for (int r = 0; r < n; ++r) {
            const HeldRange h = plan.block(b, r);
            EXPECT_EQ(h.begin - k.begin, seg[r]);
            EXPECT_EQ(h.end - k.begin, seg[r + 1]);
            for (int64_t i = h.begin; i < h.end; ++i) owners[i] += 1;
          }
        }
        for (int64_t i = 0; i < l.numel(); ++i) {
          const bool tail = plan.replicated_numel() > i;
          ASSERT_EQ(owners[i], tail ? n : 1) << "element " << i << " at n " << n;
        }
      }
    }
  }
}

TEST(ZeroPlan, HeldAndNormRangesAreSortedAndCountTheTailOnce) {
  const ParamLayout l = layout();
  const ZeroPlan plan(l, 3, BucketOptions{256, 512, true});
  ASSERT_GT(plan.replicated_numel(), 0) << "the layout should leave a tail at n 3";
  int64_t norm_total = 0;
  for (int r = 0; r < 3; ++r) {
    const auto held = plan.held(r);
    const auto norm = plan.norm_ranges(r);
    for (size_t i = 1; i < held.size(); ++i) EXPECT_LE(held[i - 1].end, held[i].begin);
    EXPECT_EQ(held.front().begin, 0) << "every rank holds the tail";
    for (const HeldRange& h : norm) norm_total += h.numel();
  }
  EXPECT_EQ(norm_total, l.numel());
}

TEST(ZeroPlan, RefusesALayoutWithNothingToShard) {
  ParamLayout l;
  l.add("w", Shape{5}, 0, true);
  l.add("b", Shape{5}, 0, false);
  l.add("h", Shape{5}, 1, false);  // 48 elements with the alignment
  EXPECT_NO_THROW(require_shardable(ZeroPlan(l, 1, BucketOptions{}), 3));
  EXPECT_NO_THROW(require_shardable(ZeroPlan(l, 2, BucketOptions{}), 3));
  try {
    require_shardable(ZeroPlan(l, 4, BucketOptions{}), 3);
    ADD_FAILURE() << "48 elements over 4 ranks were accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.zero_stage = 3 cannot shard"), std::string::npos)
        << e.what();
  }
}

TEST(ZeroPlan, SumSquaresIsTheDoubleSumOnAnyThreadCount) {
  std::vector<float> x(100003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i)) * 3.0f;
  double want = 0;
  for (float v : x) want += static_cast<double>(v) * v;
  cpu::set_num_threads(1);
  const double one = sum_squares(x.data(), static_cast<int64_t>(x.size()));
  cpu::set_num_threads(2);
  const double two = sum_squares(x.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(one, two);
  EXPECT_NEAR(one, want, 1e-9 * want);
  const double parts[] = {1.0, 3.0};
  EXPECT_EQ(norm_from_partials(parts), 2.0);
}

}  // namespace
}  // namespace etr
