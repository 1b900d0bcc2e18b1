#include "parallel/zero_plan.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"
#include "runtime/kernels/cpu/threads.h"

namespace etr {

ZeroPlan::ZeroPlan(const ParamLayout& layout, int ranks, BucketOptions options)
    : layout_(layout), ranks_(ranks) {
  options.shard_ranks = ranks;
  buckets_ = plan_buckets(layout, sizeof(float), options);
}

HeldRange ZeroPlan::block(size_t b, int r) const {
  const Bucket& k = buckets_.at(b);
  if (k.replicated) return {k.begin, k.end};
  const int64_t len = k.numel() / ranks_;
  return {k.begin + len * r, k.begin + len * (r + 1)};
}

std::vector<HeldRange> ZeroPlan::held(int r) const {
  std::vector<HeldRange> out;
  for (size_t b = buckets_.size(); b-- > 0;) {
    const HeldRange h = block(b, r);
    if (h.numel() > 0) out.push_back(h);
  }
  return out;
}

std::vector<HeldRange> ZeroPlan::norm_ranges(int r) const {
  std::vector<HeldRange> out;
  for (size_t b = buckets_.size(); b-- > 0;) {
    if (buckets_[b].replicated && r != 0) continue;
    const HeldRange h = block(b, r);
    if (h.numel() > 0) out.push_back(h);
  }
  return out;
}

std::vector<size_t> ZeroPlan::buckets_touching(int64_t begin, int64_t end) const {
  std::vector<size_t> out;
  if (begin >= end) return out;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b].begin < end && buckets_[b].end > begin) out.push_back(b);
  }
  return out;
}

int64_t ZeroPlan::replicated_numel() const {
  int64_t n = 0;
  for (const Bucket& b : buckets_) n += b.replicated ? b.numel() : 0;
  return n;
}

void require_shardable(const ZeroPlan& plan, int stage) {
  if (plan.ranks() > 1 && plan.replicated_numel() == plan.layout().numel()) {
    throw ConfigError("parallel.zero_stage = " + std::to_string(stage) + " cannot shard this model over " +
                      std::to_string(plan.ranks()) + " ranks: its " +
                      std::to_string(plan.layout().numel()) +
                      " elements are fewer than 16 per rank; use zero_stage 0");
  }
}


double norm_from_partials(std::span<const double> partials) {
  double sum = 0;
  for (double p : partials) sum += p;
  return std::sqrt(sum);
}

}  // namespace etr
