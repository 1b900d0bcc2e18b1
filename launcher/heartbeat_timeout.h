// etr-run's heartbeat timeout (--heartbeat-timeout): fixed, or learned from the beats
// (`auto`, the default). A rank beats every 50 ms from a thread of its own
// (runtime/heartbeat.h); how far apart two of its beats arrive depends on the machine (a
// loaded host, a throttled cgroup, a busy network), not on training. The learned timeout
// is a multiple of a high quantile of the gaps seen between consecutive beats of each
// rank (the kernel's arrival times), within a floor and a ceiling; until enough gaps were
// seen it is the initial value. A hiccup (a rank paused 2 s and back) is a gap like any
// other: it raises the quantile, and the timeout with it, for as long as it stays in the
// window. So a stopped worker is found in about a second on a quiet machine, and a
// machine whose beats arrive late gets the longer timeout it needs, without anyone tuning
// it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "runtime/quantile_window.h"

namespace etr::launcher {

struct HeartbeatTimeoutOptions {
  // > 0: this timeout, always (--heartbeat-timeout S); 0: learned (auto).
  std::chrono::milliseconds fixed{0};
  std::chrono::milliseconds initial{std::chrono::seconds(3)};  // until min_gaps were seen
  std::chrono::milliseconds floor{std::chrono::seconds(1)};    // --heartbeat-floor
  // The stalled-job timeout: stalled_multiple x the learned quantile of the gaps, at least
  // stalled_floor (two and a half of a rank's 50 ms beats).
  std::chrono::milliseconds stalled_floor{std::chrono::milliseconds(125)};
  double stalled_multiple = 2.5;
  std::chrono::milliseconds ceiling{std::chrono::seconds(30)};
  double multiple = 4;
  double quantile = 0.999;
  int min_gaps = 400;   // ~7 s of 3 ranks' beats
  int window = 4096;    // the newest gaps the quantile is taken over
};

class HeartbeatTimeout {
 public:
  explicit HeartbeatTimeout(HeartbeatTimeoutOptions o);

  bool learning() const { return o_.fixed.count() == 0; }
  // A gap between two consecutive beats of one rank, in seconds (ignored when fixed, and
  // when negative: a clock step).
  void observe_gap(double seconds);
  // The timeout in force now.
  std::chrono::milliseconds current() const { return current_; }
  // The timeout for a rank on which every other rank waits (heartbeat_watch.h), at most
  // current(): stalled_multiple x the learned quantile of the gaps (a silence that long
  // while the others wait is no late beat), at least stalled_floor; half of current() until
  // min_gaps were seen; current() when fixed.
  std::chrono::milliseconds stalled() const;
  // How current() came about, for etr-run's lines: "1.20 s (4 x the 99.9th percentile,
  // 0.30 s, of the last 812 gaps between beats; at least 1.00 s)", "3.00 s (fixed)", ...
  std::string describe() const;
  int64_t gaps_seen() const { return seen_; }
  // The quantile of the gaps in the window (0 before any).
  double gap_quantile() const { return quantile_; }

 private:
  void relearn();

  HeartbeatTimeoutOptions o_;
  QuantileWindow gaps_;  // the newest o_.window gaps
  int64_t seen_ = 0;
  int64_t since_relearn_ = 0;
  double quantile_ = 0;
  std::chrono::milliseconds current_;
};

}  // namespace etr::launcher
