#include "launcher/heartbeat_timeout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace etr::launcher {

namespace {

std::string secs(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f s", s);
  return b;
}

double to_seconds(std::chrono::milliseconds t) { return static_cast<double>(t.count()) / 1000.0; }

}  // namespace

HeartbeatTimeout::HeartbeatTimeout(HeartbeatTimeoutOptions o)
    : o_(o),
      gaps_(static_cast<size_t>(std::max(1, o.window))),
      current_(o.fixed.count() > 0 ? o.fixed : o.initial) {
  o_.window = static_cast<int>(gaps_.capacity());
  o_.min_gaps = std::clamp(o_.min_gaps, 1, o_.window);
}

void HeartbeatTimeout::observe_gap(double seconds) {
  if (!learning() || !(seconds >= 0) || !std::isfinite(seconds)) return;
  gaps_.add(seconds);
  ++seen_;
  ++since_relearn_;
  // A gap above the quantile may raise the timeout: at once (a longer timeout is the safe
  // side). Lower ones can only lower it: every 16 gaps is soon enough.
  if (seen_ >= o_.min_gaps && (seconds > quantile_ || since_relearn_ >= 16)) relearn();
}

void HeartbeatTimeout::relearn() {
  since_relearn_ = 0;
  quantile_ = gaps_.quantile(o_.quantile);
  const double learned = std::clamp(o_.multiple * quantile_, to_seconds(o_.floor), to_seconds(o_.ceiling));
  current_ = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(learned * 1000)));
}

std::chrono::milliseconds HeartbeatTimeout::stalled() const {
  if (!learning()) return current_;
  if (seen_ < o_.min_gaps) return std::min(current_, std::max(current_ / 2, o_.stalled_floor));
  const auto learned = std::chrono::milliseconds(
      static_cast<int64_t>(std::ceil(o_.stalled_multiple * quantile_ * 1000)));
  return std::min(current_, std::max(learned, o_.stalled_floor));
}

std::string HeartbeatTimeout::describe() const {
  if (!learning()) return secs(to_seconds(current_)) + " (fixed)";
  if (seen_ < o_.min_gaps) {
    return secs(to_seconds(current_)) + " (initial, until " + std::to_string(o_.min_gaps) +
           " gaps between beats are seen)";
  }
  char q[64];
  std::snprintf(q, sizeof q, "%g", o_.quantile * 100);
  char m[32];
  std::snprintf(m, sizeof m, "%g", o_.multiple);
  return secs(to_seconds(current_)) + " (learned: " + m + " x the " + q + "th percentile, " +
         secs(quantile_) + ", of the last " + std::to_string(gaps_.size()) +
         " gaps between beats; at least " + secs(to_seconds(o_.floor)) + ", at most " +
         secs(to_seconds(o_.ceiling)) + "); " + secs(to_seconds(stalled())) +
         " for a rank on which every other rank waits";
}

}  // namespace etr::launcher
