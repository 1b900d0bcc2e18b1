// BatchPlan: rank-major contiguous split of a step's global samples (see batch_policy.h).
#include "parallel/batch_policy.h"

#include <algorithm>
#include <string>
#include <utility>

#include "runtime/error.h"

namespace etr {

BatchPlan::BatchPlan(uint64_t global_batch, std::vector<RankBatch> ranks)
    : global_batch_(global_batch), ranks_(std::move(ranks)) {
  if (ranks_.empty()) throw InvalidArgument("a batch plan needs at least one rank");
  offsets_.reserve(ranks_.size() + 1);
  offsets_.push_back(0);
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const RankBatch& rb = ranks_[r];
    if (rb.micro_batch == 0 || rb.accumulation == 0) {
      throw InvalidArgument("rank " + std::to_string(r) + " has micro-batch " +
                            std::to_string(rb.micro_batch) + " and accumulation " +
                            std::to_string(rb.accumulation) + "; both must be at least 1");
    }
    if (rb.last > rb.micro_batch) {
      throw InvalidArgument("rank " + std::to_string(r) + "'s last micro-batch of " +
                            std::to_string(rb.last) + " samples is larger than its micro-batch " +
                            std::to_string(rb.micro_batch));
    }
    offsets_.push_back(offsets_.back() + rb.samples());
  }
  if (offsets_.back() != global_batch_) {
    throw InvalidArgument("the ranks' micro-batches sum to " +
                          std::to_string(offsets_.back()) + " samples, not the global batch " +
                          std::to_string(global_batch_));
  }
}

BatchPlan BatchPlan::uniform(uint64_t global_batch, int world_size, uint64_t micro_batch) {
  if (world_size < 1 || micro_batch == 0 ||
      global_batch % (static_cast<uint64_t>(world_size) * micro_batch) != 0) {
    throw InvalidArgument("the global batch " + std::to_string(global_batch) +
                          " is not a multiple of " + std::to_string(world_size) +
                          " ranks times the micro-batch " + std::to_string(micro_batch));
  }
  const uint64_t k = global_batch / (static_cast<uint64_t>(world_size) * micro_batch);
  return BatchPlan(global_batch,
                   std::vector<RankBatch>(static_cast<size_t>(world_size), {micro_batch, k}));
}

BatchPlan BatchPlan::balanced(uint64_t global_batch, int world_size, uint64_t micro_batch) {
  if (world_size < 1 || micro_batch == 0) {
    throw InvalidArgument("a batch plan needs at least one rank and a micro-batch of at least 1");
  }
  const auto w = static_cast<uint64_t>(world_size);
  if (global_batch < w) {
    throw InvalidArgument("the global batch of " + std::to_string(global_batch) +
                          " sequences is smaller than the " + std::to_string(world_size) +
                          " data-parallel ranks; every rank needs at least one sequence");
  }
  std::vector<RankBatch> ranks;
  for (uint64_t r = 0; r < w; ++r) {
    const uint64_t n = global_batch / w + (r < global_batch % w ? 1 : 0);
    const uint64_t b = std::min(micro_batch, n);
    const uint64_t k = (n + b - 1) / b;
    const uint64_t last = n - b * (k - 1);
    ranks.push_back(RankBatch{b, k, last == b ? 0 : last});
  }
  return BatchPlan(global_batch, std::move(ranks));
}

EvalShare eval_share(uint64_t samples, uint64_t batch, uint64_t max_samples, int rank,
                     int world) {
  if (batch == 0) throw InvalidArgument("the evaluation batch size must be at least 1");
  if (world < 1 || rank < 0 || rank >= world) {
    throw InvalidArgument("rank " + std::to_string(rank) + " is not in a world of " +
                          std::to_string(world) + " ranks");
  }
  const uint64_t n = max_samples != 0 ? std::min(samples, max_samples) : samples;
  // n r / w without overflow for any n < 2^64.
  auto block_start = [n, world](uint64_t r) {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(n) * r /
                                 static_cast<uint64_t>(world));
  };
  EvalShare s;
  s.first = block_start(static_cast<uint64_t>(rank));
  s.count = block_start(static_cast<uint64_t>(rank) + 1) - s.first;
  const uint64_t w = static_cast<uint64_t>(world);
  const uint64_t largest_block = n / w + (n % w != 0 ? 1 : 0);
  s.batches = largest_block / batch + (largest_block % batch != 0 ? 1 : 0);
  return s;
}

BatchPlan plan_data_parallel_batch(int64_t global_batch, int dp, int64_t micro_batch,
                                   uint64_t train_samples) {
  // Every rank needs at least one sequence (checked alike on every rank).
  if (global_batch < dp) {
    throw ConfigError("batch.global_batch = " + std::to_string(global_batch) +
                      " is smaller than the " + std::to_string(dp) +
                      " data-parallel ranks; every rank needs at least one sequence per step, "
                      "so raise it or start fewer ranks.");
  }
  if (micro_batch < 1) {
    throw ConfigError("batch.micro_batch = " + std::to_string(micro_batch) +
                      " must be at least 1");
  }
  // A step samples global_batch distinct windows: more than the data holds would repeat
  // samples within one step (and 2e9 of them would take years).
  if (train_samples > 0 && static_cast<uint64_t>(global_batch) > train_samples) {
    throw ConfigError("batch.global_batch = " + std::to_string(global_batch) +
                      " is more than the " + std::to_string(train_samples) +
                      " training windows of model.seq_len + 1 tokens the corpus holds; lower "
                      "it or give more data.");
  }
  return BatchPlan::balanced(static_cast<uint64_t>(global_batch), dp,
                             static_cast<uint64_t>(micro_batch));
}

const RankBatch& BatchPlan::rank(int r) const {
  if (r < 0 || r >= world_size()) {
    throw InvalidArgument("rank " + std::to_string(r) + " is outside the batch plan of " +
                          std::to_string(world_size()) + " ranks");
  }
  return ranks_[static_cast<size_t>(r)];
}

uint64_t BatchPlan::rank_offset(int r) const {
  rank(r);  // range check
  return offsets_[static_cast<size_t>(r)];
}

SampleRange BatchPlan::rank_samples(uint64_t step_begin, int r) const {
  const RankBatch& rb = rank(r);
  return {step_begin + offsets_[static_cast<size_t>(r)], rb.samples()};
}

SampleRange BatchPlan::micro_batch(uint64_t step_begin, int r, uint64_t m) const {
  const RankBatch& rb = rank(r);
  if (m >= rb.accumulation) {
    throw InvalidArgument("micro-batch " + std::to_string(m) + " does not exist; rank " +
                          std::to_string(r) + " accumulates " + std::to_string(rb.accumulation));
  }
  return {step_begin + offsets_[static_cast<size_t>(r)] + m * rb.micro_batch,
          m + 1 == rb.accumulation ? rb.last_size() : rb.micro_batch};
}

}  // namespace etr
