#include "parallel/memory_cadence.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace etr {
namespace {

constexpr size_t kRecentSteps = 9;
constexpr size_t kRecentCosts = 5;
constexpr int64_t kMaxInterval = 10000;
constexpr double kShrinkMargin = 1.2;  // a smaller interval must fit with this margin

double median_of(const std::deque<double>& v) {
  if (v.empty()) return 0;
  std::vector<double> s(v.begin(), v.end());
  std::nth_element(s.begin(), s.begin() + static_cast<long>(s.size() / 2), s.end());
  return s[s.size() / 2];
}

void push_recent(std::deque<double>& v, double x, size_t keep) {
  v.push_back(x);
  if (v.size() > keep) v.pop_front();
}

}  // namespace

MemoryCadence::MemoryCadence(int64_t every, double max_stall)
    : every_(std::max<int64_t>(1, every)),
      max_stall_(std::max(0.0, max_stall)),
      interval_(every_) {}

bool MemoryCadence::due(int64_t step) const {
  return step % interval_ == 0 || step - last_ >= interval_;
}

void MemoryCadence::step_ended(double seconds) {
  if (adaptive() && seconds > 0) push_recent(steps_, seconds, kRecentSteps);
}

double MemoryCadence::step_seconds() const {
  return median_of(steps_);
}
double MemoryCadence::cost_seconds() const {
  return median_of(costs_);
}

std::string MemoryCadence::observe(double cost_seconds, double step_seconds) {
  if (!adaptive() || !(step_seconds > 0)) return "";
  push_recent(costs_, std::max(0.0, cost_seconds), kRecentCosts);
  const double cost = median_of(costs_);
  const double allowed = max_stall_ * step_seconds;  // a save's cost per step
  auto fitting = [&](double c) {
    const double k = std::ceil(c / allowed);
    return std::clamp<int64_t>(std::isfinite(k) ? static_cast<int64_t>(k) : kMaxInterval, every_,
                               std::max(every_, kMaxInterval));
  };
  int64_t next = fitting(cost);
  if (next < interval_) next = std::max(next, fitting(cost * kShrinkMargin));
  if (next == interval_) return "";
  interval_ = next;
  char line[320];
  std::snprintf(
      line, sizeof line,
      "a save costs training %.1f ms, %.2f %% of a %.1f ms step (checkpoint.memory_max_stall "
      "%.2f %%): the memory tier now saves every %lld step(s), so a failure loses at most %lld",
      cost * 1e3, 100 * cost / step_seconds, step_seconds * 1e3, 100 * max_stall_,
      static_cast<long long>(interval_), static_cast<long long>(interval_));
  return line;
}

}  // namespace etr
