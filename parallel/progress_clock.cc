#include "parallel/progress_clock.h"

#include <algorithm>
#include <cstdio>

namespace etr {

double ProgressClock::update(double fraction, Clock::time_point now) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  if (!started_ || fraction < last_fraction_) {  // first call, or a restart of the count
    started_ = true;
    last_fraction_ = fraction;
    last_time_ = now;
    return std::nan("");
  }
  const double df = fraction - last_fraction_;
  if (df > 0) {
    const double pace = std::chrono::duration<double>(now - last_time_).count() / df;
    seconds_per_unit_ =
        std::isnan(seconds_per_unit_) ? pace : kWeight * pace + (1 - kWeight) * seconds_per_unit_;
    last_fraction_ = fraction;
    last_time_ = now;
  }
  if (std::isnan(seconds_per_unit_)) return seconds_per_unit_;
  return (1 - fraction) * seconds_per_unit_;
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0)) return "?";
  const long long s = static_cast<long long>(seconds + 0.5);
  char out[32];
  if (s < 60) {
    std::snprintf(out, sizeof out, "%llds", s);
  } else if (s < 3600) {
    std::snprintf(out, sizeof out, "%lldm%02llds", s / 60, s % 60);
  } else if (s < 86400) {
    std::snprintf(out, sizeof out, "%lldh%02lldm", s / 3600, (s / 60) % 60);
  } else {
    std::snprintf(out, sizeof out, "%lldd%02lldh", s / 86400, (s / 3600) % 24);
  }
  return out;
}

}  // namespace etr
