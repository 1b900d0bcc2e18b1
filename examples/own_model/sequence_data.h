// The model's own data: every sample is a run of the sequence t -> (5 t + 3) mod V from a
// start token of its own, so the next token is a function of the current one and a model
// that learns it drives the loss towards 0. A DataSource (parallel/data_source.h):
// samples are addressed by global index, so any rank of any world size gathers any of
// them, and a resumed or resized job continues exactly where it stopped.
#pragma once

#include <cstdint>
#include <span>

#include "parallel/data_source.h"

namespace own {

class SequenceData final : public etr::DataSource {
 public:
  SequenceData(int64_t seq_len, int64_t vocab, uint64_t seed, uint64_t eval_samples)
      : seq_len_(seq_len), vocab_(vocab), seed_(seed), eval_samples_(eval_samples) {}

  int64_t seq_len() const override { return seq_len_; }
  uint64_t train_samples() const override { return uint64_t{1} << 30; }
  uint64_t seed() const override { return seed_; }
  void gather(uint64_t first, uint64_t count, std::span<int32_t> inputs,
              std::span<int32_t> targets) const override;
  uint64_t eval_samples() const override { return eval_samples_; }
  void gather_eval(uint64_t first, uint64_t count, std::span<int32_t> inputs,
                   std::span<int32_t> targets) const override;

 private:
  // Sample `index` of stream `stream` (0: training, 1: held out).
  void sample(uint64_t stream, uint64_t index, int32_t* inputs, int32_t* targets) const;

  int64_t seq_len_, vocab_;
  uint64_t seed_, eval_samples_;
};

}  // namespace own
