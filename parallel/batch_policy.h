// The batch policy (docs/design.md, "Adaptive batch sizing"): the one place that decides which
// batch shapes are legal and how a step's global batch is split over the ranks. Today it
// splits a configured global batch evenly (BatchPlan::balanced); the adaptive policy
// (memory model, out-of-memory recovery, goodput, per-rank shares) lands here next.
//
// BatchPlan: which global samples each rank trains on in one optimizer step (docs/design.md,
// "Execution of one optimizer step": B = sum over ranks of b_r * k_r).
//
// Rank r runs k_r micro-batches of b_r samples (b_r, k_r >= 1; they may differ between
// ranks; the last one may be shorter, see RankBatch::last) and sum_r n_r = B, the global
// batch, where n_r = b_r * (k_r - 1) + last_r is rank r's share. A step consumes the B global sample
// indices [s, s + B), where s = DataPosition::samples_seen at its start (= step * B while
// B has not changed). The layout is rank-major and contiguous:
//
//   rank r owns   [s + o_r, s + o_r + n_r),     o_r = sum_{q<r} n_q
//   micro-batch m (0 <= m < k_r) of rank r is
//                 [s + o_r + m * b_r, s + o_r + min((m + 1) * b_r, n_r))
//
// so the union over ranks of all micro-batches is exactly [s, s + B), whatever the world
// size and the split, and a single process with b = B, k = 1 (or any other split) sees
// the same samples in the step; the Sampler maps each index to its window.
#pragma once

#include <cstdint>
#include <vector>

namespace etr {

struct RankBatch {
  uint64_t micro_batch = 0;   // b_r: samples per micro-batch
  uint64_t accumulation = 0;  // k_r: micro-batches per step
  // Samples in the last micro-batch, in [1, b_r]; 0 means b_r. A shorter last
  // micro-batch lets a rank take a share of the global batch that b_r does not divide.
  uint64_t last = 0;
  bool operator==(const RankBatch&) const = default;
  uint64_t last_size() const { return last == 0 ? micro_batch : last; }
  // n_r = b_r * (k_r - 1) + last_size().
  uint64_t samples() const { return micro_batch * (accumulation - 1) + last_size(); }
};

// Global sample indices [first, first + count).
struct SampleRange {
  uint64_t first = 0;
  uint64_t count = 0;
  bool operator==(const SampleRange&) const = default;
};

class BatchPlan;

// A rank's share of an evaluation over held-out samples [0, n), n = samples or
// max_samples when that is smaller and not 0: rank r of w takes the contiguous block
// [n r / w, n (r + 1) / w) in batches of `batch`; every rank runs `batches` batches (as
// many as the largest block needs), so ranks that sum per batch stay in step, and a rank
// whose block ran out gets shorter or empty ones. InvalidArgument when batch is 0 or
// rank is not in [0, world).
struct EvalShare {
  uint64_t first = 0;    // this rank's first sample
  uint64_t count = 0;    // this rank's samples
  uint64_t batches = 0;  // batches every rank runs
};
EvalShare eval_share(uint64_t samples, uint64_t batch, uint64_t max_samples, int rank, int world);

// The plan of a data-parallel step from the configuration: ConfigError (one sentence)
// when the global batch has fewer samples than there are ranks or more than the
// `train_samples` distinct samples of the data (0: not checked), or micro_batch is 0.
BatchPlan plan_data_parallel_batch(int64_t global_batch, int dp, int64_t micro_batch,
                                   uint64_t train_samples = 0);

class BatchPlan {
 public:
  // InvalidArgument when there is no rank, a b_r or k_r is 0, a last_r exceeds b_r, or
  // sum n_r != B.
  BatchPlan(uint64_t global_batch, std::vector<RankBatch> ranks);
  // The data-parallel split for any world size: rank r's share is n_r = floor(B / w),
  // plus one for the first B mod w ranks, run as ceil(n_r / b) micro-batches of at most
  // b (b = min(micro_batch, n_r)). InvalidArgument when B < world_size (a rank would
  // get no sample) or micro_batch is 0.
  static BatchPlan balanced(uint64_t global_batch, int world_size, uint64_t micro_batch);
  // Every rank with the same micro_batch b and k = B / (world_size * b); InvalidArgument
  // when B is not a multiple of world_size * b.
  static BatchPlan uniform(uint64_t global_batch, int world_size, uint64_t micro_batch);

  uint64_t global_batch() const { return global_batch_; }
  int world_size() const { return static_cast<int>(ranks_.size()); }
  const RankBatch& rank(int r) const;
  const std::vector<RankBatch>& ranks() const { return ranks_; }
  // o_r = sum_{q<r} n_q.
  uint64_t rank_offset(int r) const;

  // All samples of rank r in the step starting at global sample step_begin.
  SampleRange rank_samples(uint64_t step_begin, int r) const;
  // Micro-batch m of rank r in that step; InvalidArgument when m >= k_r.
  SampleRange micro_batch(uint64_t step_begin, int r, uint64_t m) const;

 private:
  uint64_t global_batch_;
  std::vector<RankBatch> ranks_;
  std::vector<uint64_t> offsets_;  // [world_size + 1]: o_r, and B at the end
};

}  // namespace etr
