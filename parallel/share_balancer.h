// ShareBalancer: per-rank shares of the global batch in proportion to each rank's measured
// speed (batch.shares = throughput; docs/design.md "Adaptive batch sizing", unequal workers).
//
// Each step every data-parallel rank reports how many samples it trained and how long its
// forward and backward passes took; the balancer takes each rank's samples per second as
// the median of its last `window` steps and proposes shares n_r proportional to them,
// summing to the global batch B, each at least 1 (largest remainders get the rounding).
// The median, not a mean: one step that a rank lost to something else (a page-cache
// flush, a checkpoint, the hypervisor, the first step's cold caches) does not move its
// share; a rank that stays slower for most of the window does. It proposes a change only
// when some rank's share would move by more than `hysteresis` of its current share (and at
// least one sample), and by more than the rates' step-to-step spread (the largest rank's
// median absolute deviation as a standard deviation, relative to its rate): on a quiet
// GPU node (1-2 % spread) a rank 15 % slower moves, on shared CPU cores whose speed wanders
// by 20-40 % over a few steps (a VM's neighbours) only a difference that stands out from
// that does. A share that moved by one rank's noise would move back a few steps later,
// each time re-planning the micro-batches. Every rank feeds it the same (all-gathered)
// figures and so reaches the same decision.
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
std::vector<uint64_t> proportional_shares(uint64_t global_batch,
                                          const std::vector<double>& weights);

class ShareBalancer {
 public:
  // `window`: the steps whose median is a rank's rate (>= 1); `warmup`: steps observed
  // before the first proposal.
  explicit ShareBalancer(int ranks, double hysteresis = 0.1, int window = 5, int warmup = 5);

  // One step: samples[r] trained by rank r in compute_seconds[r]. Steps with a rank that
  // took no time or trained nothing are ignored.
  void observe(const std::vector<uint64_t>& samples, const std::vector<double>& compute_seconds);
  // New shares for `current` (summing to the global batch), or nothing when they are
  // within the hysteresis or too few steps were observed.
  std::optional<std::vector<uint64_t>> propose(const std::vector<uint64_t>& current) const;
  // Samples per second of each rank: the median of its last `window` steps (0 before the
  // first observation).
  const std::vector<double>& rates() const { return rates_; }
  // The rates' step-to-step spread over the window, relative (the largest rank's); a
  // share moves only by more than this and the hysteresis.
  double spread() const { return spread_; }

 private:
  double hysteresis_;
  int window_, warmup_;
  int observed_ = 0;
  std::vector<std::vector<double>>
      recent_;  // per rank, the last `window` steps' rates, oldest first
  std::vector<double> rates_;
  double spread_ = 0;
};

}  // namespace etr
