#include "collectives/learned_deadline.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>

namespace etr {

std::string LearnedDeadlines::key(const std::string& op, size_t bytes) {
  const int log2 = bytes <= 1 ? 0 : static_cast<int>(std::bit_width(bytes - 1));
  return op + "/" + std::to_string(log2);
}

LearnedLimit LearnedDeadlines::limit(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = classes_.find(key);
  return it == classes_.end() ? LearnedLimit{fixed_} : it->second.limit;
}

LearnedLimit LearnedDeadlines::compute(const QuantileWindow& seconds) const {
  LearnedLimit l{fixed_};
  if (seconds.size() < kMinSamples) return l;
  l.quantile_s = seconds.quantile(0.99);
  l.samples = seconds.size();
  const auto learned =
      std::chrono::milliseconds(static_cast<int64_t>(std::ceil(multiple_ * l.quantile_s * 1000)));
  l.timeout = std::clamp(learned, std::min(floor_, fixed_), fixed_);
  l.learned = l.timeout < fixed_;
  return l;
}

void LearnedDeadlines::record(const std::string& key, std::chrono::steady_clock::duration took) {
  if (!(multiple_ > 0)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Class& c = classes_.try_emplace(key, Class{.limit = LearnedLimit{fixed_}}).first->second;
  c.seconds.add(std::chrono::duration<double>(took).count());
  if (++c.since >= kRecompute || c.seconds.size() == kMinSamples) {
    c.since = 0;
    c.limit = compute(c.seconds);
  }
}

std::string LearnedDeadlines::describe(const std::string& key, const LearnedLimit& l) const {
  if (!l.learned) return "";
  char text[256];
  std::snprintf(text, sizeof text,
                "the deadline learned from the last %zu %s operations: %g x their 99th "
                "percentile of %.3g s, at least comm.learned_timeout_floor_s = %g s",
                l.samples, key.c_str(), multiple_, l.quantile_s,
                static_cast<double>(floor_.count()) / 1000);
  return text;
}

}  // namespace etr
