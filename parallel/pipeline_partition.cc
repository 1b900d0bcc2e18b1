// The pipeline partitioner (see pipeline_partition.h): the exact min-max split of the
// layers, the explicit "3,2,2" split of the configuration, and their log line.
//
// Exactness rests on one property of IEEE addition of non-negative numbers: rounding is
// monotone, so a contiguous sub-range's sum (added in layer order from 0.0) never exceeds
// the sum of a range that contains it. Hence a part within a limit stays within it when it
// shrinks or splits, the greedy "take layers while the sum fits" needs the fewest parts,
// and feasibility is monotone in the limit.
#include "parallel/pipeline_partition.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "runtime/error.h"

namespace etr {
namespace {

// Sum of costs[first, last) in layer order from 0.0: how every part cost is added.
double range_cost(std::span<const double> costs, size_t first, size_t last) {
  double sum = 0.0;
  for (size_t i = first; i < last; ++i) sum += costs[i];
  return sum;
}

std::string format_cost(double cost) {
  std::ostringstream s;
  s << cost;
  return s.str();
}

void check_costs(std::span<const double> costs, int parts) {
  const size_t n = costs.size();
  if (n > static_cast<size_t>(INT_MAX)) {
    throw ConfigError("the model has " + std::to_string(n) +
                      " layers, more than the partitioner's limit of " + std::to_string(INT_MAX));
  }
  if (parts < 1 || static_cast<size_t>(parts) > n) {
    throw ConfigError("cannot split " + std::to_string(n) + " layers into " +
                      std::to_string(parts) + " pipeline stages: " +
                      (parts < 1 ? "the pipeline needs at least one stage"
                                 : "each stage needs at least one layer"));
  }
  for (size_t i = 0; i < n; ++i) {
    const double c = costs[i];
    if (!std::isfinite(c) || c < 0) {
      throw ConfigError("layer " + std::to_string(i) + " has cost " + format_cost(c) +
                        (std::isfinite(c) ? ", which is negative" : ", which is not finite") +
                        "; layer costs must be finite and at least 0");
    }
  }
}

// The fewest parts, each costing <= limit, that cover all layers (each part takes layers
// while its sum fits); max_parts + 1 once more than max_parts would be needed.
int parts_needed(std::span<const double> costs, double limit, int max_parts) {
  const size_t n = costs.size();
  int count = 0;
  size_t i = 0;
  while (i < n) {
    if (costs[i] > limit || count == max_parts) return max_parts + 1;
    double sum = 0.0;
    for (; i < n; ++i) {
      const double next = sum + costs[i];
      if (next > limit) break;
      sum = next;
    }
    ++count;
  }
  return count;
}

// L*: the smallest double limit within which `parts` parts cover the layers. Non-negative
// doubles order like their bit patterns, so this is a binary search over the bits; the
// total (one part) is always within reach.
double min_max_cost(std::span<const double> costs, int parts) {
  uint64_t lo = 0;  // +0.0
  uint64_t hi = std::bit_cast<uint64_t>(range_cost(costs, 0, costs.size()));
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (parts_needed(costs, std::bit_cast<double>(mid), parts) <= parts) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return std::bit_cast<double>(hi);
}

// reach[i]: the end of the longest part from layer i that costs <= limit (> i, as no
// layer exceeds limit); reach[n] = n.
std::vector<int> part_reach(std::span<const double> costs, double limit) {
  const int n = static_cast<int>(costs.size());
  std::vector<int> reach(costs.size() + 1, n);
  for (int i = 0; i < n; ++i) {
    double sum = 0.0;
    int end = i;
    for (; end < n; ++end) {
      const double next = sum + costs[end];
      if (next > limit) break;
      sum = next;
    }
    reach[i] = end;
  }
  return reach;
}

// The split within limit (= L*, so one exists) whose boundary k is, front to back, the
// feasible one with prefix cost closest to k / parts of the total. Layers [j, n) split
// into exactly m parts within limit iff fewest[j] <= m <= n - j, so boundary k after b
// may be any j in [first, last]: first is the smallest j > b with fewest[j] <= parts - k,
// last = min(reach[b], n - (parts - k)) is the greedy one, and first <= last.
std::vector<int> choose_boundaries(std::span<const double> costs, int parts, double limit) {
  const int n = static_cast<int>(costs.size());
  const std::vector<int> reach = part_reach(costs, limit);
  std::vector<int> fewest(costs.size() + 1, 0);
  for (int i = n - 1; i >= 0; --i) fewest[i] = 1 + fewest[reach[i]];
  std::vector<double> prefix(costs.size() + 1, 0.0);  // approximate: only to aim at targets
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];

  std::vector<int> bounds{0};
  for (int k = 1; k < parts; ++k) {
    const int b = bounds.back();
    const int left = parts - k;
    const int last = std::min(reach[b], n - left);
    int first = b + 1;
    while (first < last && fewest[first] > left) ++first;
    const double target = prefix[n] * k / parts;
    int best = first;
    for (int j = first + 1; j <= last; ++j) {
      if (std::abs(prefix[j] - target) < std::abs(prefix[best] - target)) best = j;
    }
    bounds.push_back(best);
  }
  bounds.push_back(n);
  return bounds;
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n\v\f";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

// One entry of an explicit partition: a whole number of layers, at least 1.
int parse_entry(std::string_view entry, const std::string& quoted, int index) {
  if (entry.empty()) {
    throw ConfigError(quoted + " has an empty entry at position " + std::to_string(index + 1) +
                      "; write the layers of each stage separated by commas, such as \"3,2,2\"");
  }
  int64_t layers = 0;
  for (const char c : entry) {
    if (c < '0' || c > '9') {
      throw ConfigError(quoted + " has the entry \"" + std::string(entry) +
                        "\", which is not a whole number of layers");
    }
    layers = layers * 10 + (c - '0');
    if (layers > INT_MAX) {
      throw ConfigError(quoted + " has the entry \"" + std::string(entry) +
                        "\", more layers than the limit of " + std::to_string(INT_MAX));
    }
  }
  if (layers == 0) {
    throw ConfigError(quoted + " gives stage " + std::to_string(index) +
                      " 0 layers; every stage needs at least one layer");
  }
  return static_cast<int>(layers);
}

void check_bounds(std::span<const int> bounds) {
  if (bounds.size() < 2 || bounds[0] != 0) {
    throw InvalidArgument("partition boundaries need at least two entries and start at 0; got " +
                          std::to_string(bounds.size()) + " entries");
  }
  for (size_t i = 1; i < bounds.size(); ++i) {
    if (bounds[i] <= bounds[i - 1]) {
      throw InvalidArgument("partition boundary " + std::to_string(i) + " is " +
                            std::to_string(bounds[i]) + ", not above the previous one " +
                            std::to_string(bounds[i - 1]));
    }
  }
}

}  // namespace

std::vector<int> balance_partition(std::span<const double> costs, int parts) {
  check_costs(costs, parts);
  return choose_boundaries(costs, parts, min_max_cost(costs, parts));
}

std::vector<int> parse_partition(std::string_view text, int n_layers, int parts) {
  const std::string quoted = "the pipeline partition \"" + std::string(text) + "\"";
  std::vector<int> layers;
  int64_t sum = 0;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    const std::string_view entry = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    layers.push_back(parse_entry(trim(entry), quoted, static_cast<int>(layers.size())));
    sum += layers.back();
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (layers.size() != static_cast<size_t>(parts)) {
    throw ConfigError(quoted + " lists " + std::to_string(layers.size()) +
                      " stages but the pipeline has " + std::to_string(parts) +
                      " (stages times virtual stages)");
  }
  if (sum != n_layers) {
    throw ConfigError(quoted + " covers " + std::to_string(sum) + " layers but the model has " +
                      std::to_string(n_layers));
  }
  std::vector<int> bounds{0};
  for (const int l : layers) bounds.push_back(bounds.back() + l);
  return bounds;
}

std::vector<double> part_costs(std::span<const double> costs, std::span<const int> bounds) {
  check_bounds(bounds);
  if (static_cast<size_t>(bounds.back()) != costs.size()) {
    throw InvalidArgument("partition boundaries end at layer " + std::to_string(bounds.back()) +
                          " but there are " + std::to_string(costs.size()) + " layers");
  }
  std::vector<double> out;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    out.push_back(
        range_cost(costs, static_cast<size_t>(bounds[i]), static_cast<size_t>(bounds[i + 1])));
  }
  return out;
}

std::string describe_partition(std::span<const int> bounds) {
  check_bounds(bounds);
  std::string out = "layers ";
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    if (i > 0) out += " | ";
    const int first = bounds[i];
    const int last = bounds[i + 1] - 1;
    out += std::to_string(first);
    if (last > first) {
      out += '-';  // (not "-" + to_string: GCC 12 -O3 warns falsely, -Wrestrict)
      out += std::to_string(last);
    }
  }
  return out;
}

}  // namespace etr
