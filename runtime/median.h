// The median of a few values: the middle one, or the mean of the middle two for an even
// count; 0 for none. By value: it sorts its own copy.
#pragma once

#include <algorithm>
#include <vector>

namespace etr {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace etr
