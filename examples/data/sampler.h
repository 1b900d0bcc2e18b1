// Sampler: the training sample order, addressed by (global sample index, seed), so that
// any rank of any world size computes the window of any sample in O(1) and a resumed job
// continues exactly where the saved one stopped (docs/design.md, "Elasticity": the data
// position is the same after any relaunch).
//
// Global sample index g counts samples from the start of training, over all ranks. With
// M = windows().count() windows in the training split:
//
//   epoch(g)  = g / M
//   window(g) = P_e(g mod M)    P_e = IndexPermutation(M, mix64(seed) + e), e = epoch(g)
//   sample(g) = windows().offset(window(g))   // the token offset of the window
//
// so every epoch visits each training window exactly once, in an order that depends on
// the seed and the epoch only. Nothing is materialised and the Sampler has no mutable
// state: the caller keeps the position (DataPosition) and saves it with a checkpoint.
//
// DataPosition is everything the data order needs to resume: the optimizer step, the
// number of global samples consumed before it (samples_seen; = step * B while the global
// batch B has not changed) and the seed. A step consumes the global samples
// [samples_seen, samples_seen + B), split among ranks by a BatchPlan (parallel/batch_policy.h).
// The token file and seq_len must also be the same after a restore, or the windows
// differ; the caller checks that (e.g. with the file's checksum).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "examples/data/window_space.h"
#include "parallel/data_source.h"

namespace etr::data {

// DataPosition (the step, the samples consumed, the seed) is the loop's: parallel/data_source.h.
using ::etr::DataPosition;

class Sampler {
 public:
  // ConfigError when `windows` holds no window.
  Sampler(WindowSpace windows, uint64_t seed);

  const WindowSpace& windows() const { return windows_; }
  uint64_t seed() const { return seed_; }
  uint64_t windows_per_epoch() const { return windows_per_epoch_; }

  uint64_t epoch(uint64_t sample_index) const { return sample_index / windows_per_epoch_; }
  // The training window (index into windows()) of a global sample.
  uint64_t window(uint64_t sample_index) const;
  // The token offset of that window.
  uint64_t sample(uint64_t sample_index) const { return windows_.offset(window(sample_index)); }
  // offsets[i] = sample(first + i).
  void samples(uint64_t first, std::span<uint64_t> offsets) const;
  // The model's input for the global samples [first, first + count), e.g. a micro-batch
  // from BatchPlan::micro_batch: row i of inputs and targets, each [count, seq_len]
  // row-major, is copy_window() of sample(first + i). InvalidArgument when the spans are
  // not count * seq_len long or `tokens` is shorter than the windows' split.
  void gather(std::span<const uint16_t> tokens, uint64_t first, uint64_t count,
              std::span<int32_t> inputs, std::span<int32_t> targets) const;

 private:
  WindowSpace windows_;
  uint64_t seed_;
  uint64_t windows_per_epoch_;
};

}  // namespace etr::data
