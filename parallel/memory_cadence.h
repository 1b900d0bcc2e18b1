// MemoryCadence: which steps the memory tier saves (parallel/checkpoint_cadence.h). Every
// `checkpoint.memory_every` steps, or, with `checkpoint.memory_max_stall` > 0, sparser
// when a save costs training more than that fraction of a step (CheckFreq's bound on
// checkpoint overhead): every k steps, the smallest k with cost / k <= max_stall x step.
//
//   MemoryCadence c(every, max_stall);
//   c.step_ended(seconds);            // each step's wall time on this rank
//   if (c.due(step)) { save(); c.saved(step); }
//   c.observe(cost, step_seconds);    // a committed save's cost and the recent step time,
//                                     // both agreed over the ranks (the largest: the job
//                                     // steps at its slowest rank's pace)
//
// A save's cost is what it takes from training: the training thread's wait in save() and
// for the snapshot, its commit, and the writer thread's CPU time when the writer shares
// the ranks' cores. Costs and step times are medians of the recent ones; the interval
// grows at once and shrinks only when the smaller one fits with a 20 % margin, so noise
// does not flap it. Deterministic: the same calls give the same steps on every rank.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

namespace etr {

class MemoryCadence {
 public:
  // every >= 1; max_stall 0 = every `every` steps whatever a save costs.
  MemoryCadence(int64_t every, double max_stall);

  // Due at multiples of the interval, and whenever interval() steps have passed since the
  // last save (after the interval changed, or after a resume).
  bool due(int64_t step) const;
  void saved(int64_t step) { last_ = step; }
  void step_ended(double seconds);
  // A committed save's cost and the step time in seconds, both the same on every rank
  // (agreed by the caller). Returns a sentence when the interval changed, else "".
  std::string observe(double cost_seconds, double step_seconds);

  int64_t interval() const { return interval_; }
  bool adaptive() const { return max_stall_ > 0; }
  // The median of this rank's recent steps, and of the recent costs given (0 before any).
  double step_seconds() const;
  double cost_seconds() const;

 private:
  int64_t every_;
  double max_stall_;
  int64_t interval_;
  int64_t last_ = 0;
  std::deque<double> steps_, costs_;
};

}  // namespace etr
