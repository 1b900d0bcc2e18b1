// etr-run's progress watchdog: a job whose ranks all live (their heartbeats arrive) but
// whose training stands still (a deadlock, a rank spinning in a loop, a collective that
// never completes, a GPU kernel that never returns) is declared stuck, so that it is
// ended and relaunched instead of waiting for the collectives' fixed timeout.
//
// Its input is what the heartbeats carry (runtime/heartbeat.h): each rank's completed
// steps and the stage its training thread is in. Progress is any change of either on any
// rank. The job is stuck when nothing changed for longer than its limit:
//   - while any rank is in a stage where long stalls are expected (start-up, a restore,
//     evaluation, a checkpoint's save, the end of the run: `slow_stage`), and before this
//     launch's first step: the allowance (--stuck-allowance);
//   - otherwise `multiple` times the recent step time (the median of the last 16 intervals
//     between steps, as the beats saw them), at least the floor (--stuck-floor).
// The watch names where the job stood: the lowest step of any rank, the stages the ranks
// at it are in, and a rank when it alone is behind the others.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/heartbeat_watch.h"

namespace etr::launcher {

struct ProgressLimits {
  double multiple = 10;  // of the recent step time; 0 turns the watchdog off
  std::chrono::milliseconds floor{std::chrono::seconds(10)};
  std::chrono::milliseconds allowance{std::chrono::seconds(300)};
  bool on() const { return multiple > 0; }
};

struct Stuck {
  double stalled_seconds = 0;  // since the last change
  double limit_seconds = 0;
  std::string limit_why;  // "10 x the recent step time of 0.12 s", "the floor", ...
  int64_t step = 0;       // the lowest step completed by any rank
  std::string where;      // "rank 1 in compute", "ranks 0-1 in step-sums", ...
  int rank = -1;          // the one rank behind all others, else -1
  // One sentence for etr-run's log.
  std::string describe() const;
};

class ProgressWatch {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ProgressWatch(ProgressLimits limits) : limits_(limits) {}

  const ProgressLimits& limits() const { return limits_; }
  // A new launch: its history starts over (a relaunch's steps say nothing of the last).
  void begin_launch(Clock::time_point now = Clock::now());
  // The ranks' positions as last heard (HeartbeatWatch::positions()). Returns the stall
  // once, when the job first passes its limit.
  std::optional<Stuck> observe(const std::vector<HeartbeatWatch::Position>& ranks,
                               Clock::time_point now = Clock::now());
  // The median of the recent intervals between steps, 0 before two steps were seen.
  double recent_step_seconds() const;

 private:
  struct Seen {
    int64_t step;
    RankStage stage;
  };
  Stuck where(const std::vector<HeartbeatWatch::Position>& ranks) const;

  ProgressLimits limits_;
  std::map<int, Seen> seen_;
  Clock::time_point last_change_{};
  Clock::time_point last_step_{};
  int64_t top_step_ = -1;
  int steps_seen_ = 0;  // advances of the top step in this launch
  std::deque<double> intervals_;
  bool reported_ = false;
};

}  // namespace etr::launcher
