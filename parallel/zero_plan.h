// ZeroPlan: which elements of the flat state each of n data-parallel ranks owns under
// ZeRO, and the gradient norm summed in one order whatever the stage (docs/design.md, "Core
// data layout": a ZeRO shard is a set of ranges of the flat buffers).
//
// The buckets are the gradient buckets of data parallelism cut for n ranks
// (plan_buckets with shard_ranks = n): each holds a multiple of 16 n elements, so
//
//   block r of bucket b = [begin + len r / n, begin + len (r+1) / n)
//
// is exactly the segment the ring allreduce of stage 0 sums at rank r, and the
// reduce-scatter of stages 1-3 sums the same numbers in the same order: every stage is
// bitwise stage 0. Rank r owns block r of every bucket; the tail bucket [0, x), x < 16 n
// (replicated), is held by every rank and allreduced.
//
//   buckets (from the end)   | b2        | b1        | b0   |
//   rank 0 owns              |r0|        |r0|        |r0|
//   rank 1 owns                 |r1|        |r1|        |r1|
//
// The gradient norm: rank r sums the squares of its owned ranges (the tail on rank 0
// only) in increasing order, in double, blockwise in a fixed order (sum_squares); the
// partials are added in rank order. Stage 0 computes every rank's partial itself and
// adds them the same way, so its clipping factor is bitwise the ZeRO stages'.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "parallel/bucket_reducer.h"
#include "runtime/adamw.h"
#include "runtime/flat_state.h"
#include "runtime/param_layout.h"

namespace etr {

class ZeroPlan {
 public:
  // InvalidArgument (from plan_buckets) when a bucket size is 0 or ranks < 1.
  ZeroPlan(const ParamLayout& layout, int ranks, BucketOptions options);

  int ranks() const { return ranks_; }
  const ParamLayout& layout() const { return layout_; }
  // In plan order (bucket 0 ends at layout.numel()).
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Rank r's block of bucket b (all of it when the bucket is replicated).
  HeldRange block(size_t b, int r) const;
  // What rank r holds, sorted: its block of every bucket (the replicated tail whole).
  std::vector<HeldRange> held(int r) const;
  // The ranges whose squares rank r adds to the gradient norm, sorted: held(r) without
  // the replicated tail, except on rank 0.
  std::vector<HeldRange> norm_ranges(int r) const;
  // The buckets that intersect [begin, end), in increasing order of index.
  std::vector<size_t> buckets_touching(int64_t begin, int64_t end) const;
  // Elements every rank keeps whole (the replicated tail).
  int64_t replicated_numel() const;

  // Rank r's partial: the sum of squares of `values` over norm_ranges(r), where `values`
  // holds element begin of range i at values_of(i).
  template <typename ValuesOf>
  double partial_norm(int r, ValuesOf values_of, int64_t from = 0) const;

 private:
  const ParamLayout& layout_;
  int ranks_;
  std::vector<Bucket> buckets_;
};

// ConfigError (one sentence naming parallel.zero_stage) when `plan` leaves nothing to
// shard: on more than one rank, every element is in the replicated tail (fewer than 16
// elements per rank).
void require_shardable(const ZeroPlan& plan, int stage);

// sqrt of the partials added in rank order.
double norm_from_partials(std::span<const double> partials);

template <typename ValuesOf>
double ZeroPlan::partial_norm(int r, ValuesOf values_of, int64_t from) const {
  const std::vector<HeldRange> ranges = norm_ranges(r);
  double sum = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const int64_t skip = std::clamp<int64_t>(from - ranges[i].begin, 0, ranges[i].numel());
    sum += sum_squares(values_of(ranges[i]) + skip, ranges[i].numel() - skip);
  }
  return sum;
}

}  // namespace etr
