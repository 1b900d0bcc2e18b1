// ShareBalancer: throughput-proportional shares with hysteresis (share_balancer.h).
#include "parallel/share_balancer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "runtime/error.h"

namespace etr {

std::vector<uint64_t> proportional_shares(uint64_t global_batch, const std::vector<double>& weights) {
  const size_t n = weights.size();
  if (n == 0 || global_batch < n) {
    throw InvalidArgument("a global batch of " + std::to_string(global_batch) +
                          " samples cannot give each of " + std::to_string(n) + " ranks one");
  }
  double total = 0;
  for (double w : weights) {
    if (!(w > 0) || !std::isfinite(w)) throw InvalidArgument("a rank's weight is not positive and finite");
    total += w;
  }
  // One sample each, the rest in proportion: floors first, then the largest remainders.
  const uint64_t rest = global_batch - n;
  std::vector<uint64_t> shares(n, 1);
  std::vector<double> remainder(n);
  uint64_t given = 0;
  for (size_t r = 0; r < n; ++r) {
    const double exact = static_cast<double>(rest) * weights[r] / total;
    const uint64_t whole = std::min<uint64_t>(rest - given, static_cast<uint64_t>(std::floor(exact)));
    shares[r] += whole;
    given += whole;
    remainder[r] = exact - static_cast<double>(whole);
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t i = 0; given < rest; i = (i + 1) % n, ++given) ++shares[order[i]];
  return shares;
}

ShareBalancer::ShareBalancer(int ranks, double hysteresis, double smoothing, int warmup)
    : hysteresis_(hysteresis), smoothing_(smoothing), warmup_(warmup),
      rates_(static_cast<size_t>(std::max(ranks, 1)), 0.0) {
  if (ranks < 1 || !(hysteresis >= 0) || !(smoothing >= 0 && smoothing < 1) || warmup < 0) {
    throw InvalidArgument("a share balancer needs ranks >= 1, hysteresis >= 0, smoothing in [0, 1)");
  }
}

void ShareBalancer::observe(const std::vector<uint64_t>& samples,
                            const std::vector<double>& compute_seconds) {
  if (samples.size() != rates_.size() || compute_seconds.size() != rates_.size()) {
    throw InvalidArgument("a share balancer of " + std::to_string(rates_.size()) +
                          " ranks was given another number of figures");
  }
  for (size_t r = 0; r < rates_.size(); ++r) {
    if (samples[r] == 0 || !(compute_seconds[r] > 0) || !std::isfinite(compute_seconds[r])) return;
  }
  for (size_t r = 0; r < rates_.size(); ++r) {
    const double rate = static_cast<double>(samples[r]) / compute_seconds[r];
    rates_[r] = observed_ == 0 ? rate : smoothing_ * rates_[r] + (1 - smoothing_) * rate;
  }
  ++observed_;
}

std::optional<std::vector<uint64_t>> ShareBalancer::propose(const std::vector<uint64_t>& current) const {
  if (observed_ < std::max(warmup_, 1) || current.size() != rates_.size()) return std::nullopt;
  const uint64_t total = std::accumulate(current.begin(), current.end(), uint64_t{0});
  std::vector<uint64_t> target = proportional_shares(total, rates_);
  for (size_t r = 0; r < current.size(); ++r) {
    const double moved = std::fabs(static_cast<double>(target[r]) - static_cast<double>(current[r]));
    if (moved >= 1 && moved > hysteresis_ * static_cast<double>(current[r])) return target;
  }
  return std::nullopt;
}

}  // namespace etr
