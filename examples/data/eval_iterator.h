// EvalIterator: the held-out windows in a fixed order (eval_share in
// parallel/batch_policy.h splits them), in batches, optionally split among
// the ranks of a data-parallel job, for measuring validation loss.
//
//   EvalIterator it(split.val, /*batch_size=*/8, /*max_windows=*/64, rank, world_size);
//   std::vector<uint64_t> offsets;
//   while (it.next(offsets)) { ... copy_window(tokens, offsets[i], ...) ... }
//
// The windows evaluated are [0, n) of the WindowSpace, n = count() or max_windows when
// that is smaller and not 0; no shuffling, so two evaluations of the same model give the
// same loss. Rank r of w takes the contiguous block [n * r / w, n * (r + 1) / w). Every
// rank returns true from next() the same number of times, batches() =
// ceil(ceil(n / w) / batch_size), so ranks that allreduce per batch stay in step; a rank
// whose block ran out gets shorter or empty batches (weight losses by the window count).
#pragma once

#include <cstdint>
#include <vector>

#include "examples/data/window_space.h"
#include "parallel/batch_policy.h"

namespace etr::data {

class EvalIterator {
 public:
  // InvalidArgument when batch_size is 0 or rank is not in [0, world_size).
  EvalIterator(const WindowSpace& windows, uint64_t batch_size, uint64_t max_windows = 0,
               int rank = 0, int world_size = 1);

  // Fills `offsets` with the token offsets of the next batch (at most batch_size, possibly
  // none); false, with offsets empty, after batches() calls.
  bool next(std::vector<uint64_t>& offsets);
  void reset() { batch_ = 0; }

  uint64_t batches() const { return batches_; }
  // This rank's windows: [first_window(), first_window() + windows()).
  uint64_t first_window() const { return first_; }
  uint64_t windows() const { return count_; }

 private:
  WindowSpace space_;
  uint64_t batch_size_;
  uint64_t first_ = 0;
  uint64_t count_ = 0;
  uint64_t batches_ = 0;
  uint64_t batch_ = 0;  // batches handed out since construction or reset()
};

}  // namespace etr::data
