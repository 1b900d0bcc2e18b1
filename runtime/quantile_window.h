// A window of the newest values and their nearest-rank quantile: what the learned timeouts
// take a high quantile of (collectives/learned_deadline.h: a class of collectives'
// durations; launcher/heartbeat_timeout.h: the gaps between a run's heartbeats).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace etr {

class QuantileWindow {
 public:
  explicit QuantileWindow(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}

  // Adds x; past the capacity it replaces the oldest value.
  void add(double x) {
    if (values_.size() < capacity_) {
      values_.push_back(x);
    } else {
      values_[next_] = x;
      next_ = (next_ + 1) % capacity_;
    }
  }
  size_t size() const { return values_.size(); }
  size_t capacity() const { return capacity_; }
  // The smallest value that at least a fraction q of the window is not above (the
  // nearest rank); 0 for an empty window. Selects in a copy: O(size).
  double quantile(double q) const {
    if (values_.empty()) return 0;
    std::vector<double> v = values_;
    const size_t n = v.size();
    const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
    const size_t at = std::min(n, std::max<size_t>(1, rank)) - 1;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(at), v.end());
    return v[at];
  }

 private:
  size_t capacity_;
  std::vector<double> values_;  // a ring once full; next_ is the oldest
  size_t next_ = 0;
};

}  // namespace etr
