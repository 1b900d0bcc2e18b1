// plan_buckets (parallel/bucket_reducer.h): the buckets tile the flat buffer from its end
// backwards, the first one small and the rest capped, and each is ready exactly when the
// lowest layer it touches has reported; checked against a brute-force walk over every
// element, for many size pairs including ones that split tensors mid-way.
#include <gtest/gtest.h>

#include <algorithm>

#include "parallel/bucket_reducer.h"
#include "runtime/error.h"

namespace etr {
namespace {

// Four layers with tensors of awkward sizes (alignment padding between them).
ParamLayout layout() {
  ParamLayout l;
  l.add("emb", Shape{37, 5}, 0, true);
  l.add("a.w", Shape{13, 11}, 1, true);
  l.add("a.b", Shape{13}, 1, false);
  l.add("b.w", Shape{101}, 2, true);
  l.add("head", Shape{7, 3}, 3, false);
  return l;
}

// The layer of element i, or -1 for padding.
int layer_of(const ParamLayout& l, int64_t i) {
  for (int layer = 0; layer < l.num_layers(); ++layer) {
    auto [b, e] = l.layer_range(layer);
    if (i >= b && i < e) return layer;
  }
  return -1;
}

TEST(BucketPlan, TilesTheBufferBackwardsWithASmallFirstBucket) {
  const ParamLayout l = layout();
  for (size_t first : {4u, 40u, 400u, 4000u}) {
    for (size_t cap : {4u, 12u, 100u, 1000u, 1u << 20}) {
      const auto buckets = plan_buckets(l, sizeof(float), BucketOptions{first, cap, true});
      ASSERT_FALSE(buckets.empty());
      EXPECT_EQ(buckets.front().end, l.numel());
      EXPECT_EQ(buckets.back().begin, 0);
      for (size_t k = 0; k < buckets.size(); ++k) {
        const Bucket& b = buckets[k];
        ASSERT_LT(b.begin, b.end);
        if (k > 0) {
          EXPECT_EQ(b.end, buckets[k - 1].begin) << "contiguous, in reverse";
        }
        const int64_t want = static_cast<int64_t>((k == 0 ? first : cap) / sizeof(float));
        if (b.begin > 0) {
          EXPECT_EQ(b.end - b.begin, want);
        } else {
          EXPECT_LE(b.end - b.begin, want);
        }
        // Ready once the lowest layer it touches reported (brute force over elements).
        int lowest = l.num_layers();
        for (int64_t i = b.begin; i < b.end; ++i) {
          const int layer = layer_of(l, i);
          if (layer >= 0) lowest = std::min(lowest, layer);
        }
        if (lowest < l.num_layers()) {
          EXPECT_EQ(b.ready_layer, lowest) << "bucket " << k;
        }
        if (k > 0) {
          EXPECT_LE(b.ready_layer, buckets[k - 1].ready_layer) << "launch order";
        }
      }
    }
  }
}

TEST(BucketPlan, RejectsEmptyBuckets) {
  EXPECT_THROW(plan_buckets(layout(), 4, BucketOptions{0, 100, true}), InvalidArgument);
  EXPECT_THROW(plan_buckets(layout(), 4, BucketOptions{100, 0, true}), InvalidArgument);
}

TEST(ReduceStats, HiddenFraction) {
  EXPECT_DOUBLE_EQ((ReduceStats{0.010, 0.002, 3, 0}).hidden_fraction(), 0.8);
  EXPECT_DOUBLE_EQ((ReduceStats{0.010, 0.020, 3, 0}).hidden_fraction(), 0.0);  // clamped
  EXPECT_DOUBLE_EQ((ReduceStats{}).hidden_fraction(), 1.0);  // nothing to hide
}

}  // namespace
}  // namespace etr
