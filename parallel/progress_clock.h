// How far a run is and how long it has left, for the progress line (step_report.h).
//
//   ProgressClock clock;
//   clock.update(0.10, now);            // 10 % done: no estimate yet (NaN)
//   double left = clock.update(0.12, later);  // seconds left at the recent pace
//
// The pace is the wall time per unit of progress between successive updates, smoothed
// exponentially (weight kWeight on the newest interval), so that evaluations and
// checkpoint saves between progress lines count, a slow first step (warm-up, first
// touches) is forgotten, and a change of pace (a resize, a new micro-batch) shows within
// a few lines. Progress is a fraction of the run in [0, 1] (steps / schedule.max_steps,
// or the scale-invariant progress of an automatic global batch).
#pragma once

#include <chrono>
#include <cmath>
#include <string>

namespace etr {

class ProgressClock {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr double kWeight = 0.3;

  // Seconds left at the smoothed pace, or NaN before two updates with progress between.
  double update(double fraction, Clock::time_point now);

 private:
  bool started_ = false;
  double last_fraction_ = 0;
  Clock::time_point last_time_{};
  double seconds_per_unit_ = std::nan("");  // smoothed wall time per unit of progress
};

// "45s", "3m20s", "2h05m", "3d04h": a duration for people; "?" for NaN or negative.
std::string format_duration(double seconds);

}  // namespace etr
