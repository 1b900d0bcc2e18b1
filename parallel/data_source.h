// DataSource: what the training loop needs from a data pipeline (docs/design.md, "Layers and
// folders": examples/data implements it for token files and the synthetic corpus).
//
// Samples are addressed by a global index g (counted from the start of training over
// every rank), so that any rank of any world size gathers any sample and a resumed job
// continues where the saved one stopped: the loop keeps the DataPosition, saves it in
// checkpoints and asks for the samples the batch policy gives this rank.
//
//   inputs, targets   [count, seq_len()] int32 token ids each (targets: the next tokens)
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace etr {

// Everything the data order needs to resume: the optimizer steps completed, the global
// samples consumed by them (= step * B while the global batch B has not changed) and the
// seed of the sample order.
struct DataPosition {
  uint64_t step = 0;
  uint64_t samples_seen = 0;
  uint64_t seed = 0;

  // After a step of global_batch samples.
  void advance(uint64_t global_batch) {
    ++step;
    samples_seen += global_batch;
  }
  bool operator==(const DataPosition&) const = default;
};

// "step 12, samples 384, seed 7" (for logs).
std::string to_string(const DataPosition& position);

class DataSource {
 public:
  virtual ~DataSource() = default;

  // Tokens per sample.
  virtual int64_t seq_len() const = 0;
  // Distinct training samples (one epoch); the loop refuses a global batch larger.
  virtual uint64_t train_samples() const = 0;
  // The seed of the sample order (saved in checkpoints).
  virtual uint64_t seed() const = 0;
  // Global training samples [first, first + count).
  virtual void gather(uint64_t first, uint64_t count, std::span<int32_t> inputs,
                      std::span<int32_t> targets) const = 0;

  // Held-out samples, in a fixed order (0: none; the loop then does not evaluate).
  virtual uint64_t eval_samples() const { return 0; }
  // Held-out samples [first, first + count).
  virtual void gather_eval(uint64_t first, uint64_t count, std::span<int32_t> inputs,
                           std::span<int32_t> targets) const;
};

}  // namespace etr
