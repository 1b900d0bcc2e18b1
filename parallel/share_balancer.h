// ShareBalancer: per-rank shares of the global batch in proportion to each rank's measured
// speed (batch.shares = throughput; docs/design.md "Adaptive batch sizing", unequal workers).
//
// Each step every data-parallel rank reports how many samples it trained and how long its
// forward and backward passes took; the balancer smooths each rank's samples per second
// (an exponential moving average) and proposes shares n_r proportional to them, summing to
// the global batch B, each at least 1 (largest remainders get the rounding). It proposes a
// change only when some rank's share would move by more than `hysteresis` of its current
// share (and at least one sample), so noise does not re-plan every step. Every rank feeds
// it the same (all-gathered) figures and so reaches the same decision.
//
// The update stays the uniform-sampling one whatever the shares: every sample's loss is
// weighted 1 / (B T) (parallel/batch_policy.h), so the summed gradient is the mean over
// the global batch's samples, however they are split.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace etr {

// n_r proportional to weights[r], sum B, each >= 1 (largest remainder method).
// InvalidArgument when B < ranks or a weight is not positive and finite.
std::vector<uint64_t> proportional_shares(uint64_t global_batch, const std::vector<double>& weights);

class ShareBalancer {
 public:
  // `smoothing`: the weight of the previous average, in [0, 1); `warmup`: steps observed
  // before the first proposal.
  explicit ShareBalancer(int ranks, double hysteresis = 0.1, double smoothing = 0.5,
                         int warmup = 2);

  // One step: samples[r] trained by rank r in compute_seconds[r]. Steps with a rank that
  // took no time or trained nothing are ignored.
  void observe(const std::vector<uint64_t>& samples, const std::vector<double>& compute_seconds);
  // New shares for `current` (summing to the global batch), or nothing when they are
  // within the hysteresis or too few steps were observed.
  std::optional<std::vector<uint64_t>> propose(const std::vector<uint64_t>& current) const;
  // Samples per second of each rank, smoothed (0 before the first observation).
  const std::vector<double>& rates() const { return rates_; }

 private:
  double hysteresis_, smoothing_;
  int warmup_;
  int observed_ = 0;
  std::vector<double> rates_;
};

}  // namespace etr
