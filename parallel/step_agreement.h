// StepAgreement: what every rank must decide alike after a step's backward, agreed in
// one sum over the world's ranks (the loss's own sum: the rest rides on it at no extra
// cost), so that all take the same branch: keep or skip the step, redo it smaller after
// an out-of-memory error, resize, stop, re-plan the micro-batch.
//
// A rank fills in its own values; agree() sums each field over the ranks in place.
// The sums are defined so that every rank reads the same decision:
//   loss                finite on every rank or on none (a NaN or an infinity in any
//                       term makes every rank's sum one)
//   flags               counts of the ranks that raised them: > 0 on every rank or none
//   bubble, norm wait   a pipeline's; means over the ranks (bubble_mean, norm_wait_mean)
//   goodput_term        an automatic global batch's n_r |g_r|^2, summed
//   compute_seconds     the step's compute (when the step is timed), summed
//   optimizer_seconds   the last optimizer step's (automatic global batch), summed
#pragma once

#include <functional>

namespace etr {

struct StepAgreement {
  double loss = 0;           // this rank's loss summed over its tokens / (B T)
  bool resize = false;       // this rank asks for a resize (elastic)
  bool stop = false;         // this rank was asked to stop (runtime/elastic.h: stop_signal)
  bool nonfinite_norm = false;  // this rank's gradient norm is not finite
  bool replan = false;       // this rank's memory budget wants another micro-batch
  bool out_of_memory = false;   // this rank met an out-of-memory error inside the step
  double bubble = 0;         // pipeline: this rank's measured bubble
  double norm_wait_seconds = 0;  // pipeline: this rank's wait in the norm's sum
  double goodput_term = 0;
  double compute_seconds = 0;
  double optimizer_seconds = 0;
  int ranks = 1;             // after agree(): how many ranks summed

  // Sums every field over the ranks with `sum` (in place over `count` doubles; a no-op
  // on one rank), `ranks` of them.
  using Sum = std::function<void(double* values, int count)>;
  void agree(const Sum& sum, int ranks);

  double bubble_mean() const { return bubble / ranks; }
  double norm_wait_mean() const { return norm_wait_seconds / ranks; }
};

}  // namespace etr
