// ShareBalancer: throughput-proportional shares with hysteresis (share_balancer.h).
#include "parallel/share_balancer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "runtime/error.h"
#include "runtime/median.h"

namespace etr {

std::vector<uint64_t> proportional_shares(uint64_t global_batch,
                                          const std::vector<double>& weights) {
  const size_t n = weights.size();
  if (n == 0 || global_batch < n) {
    throw InvalidArgument("a global batch of " + std::to_string(global_batch) +
                          " samples cannot give each of " + std::to_string(n) + " ranks one");
  }
  double total = 0;
  for (double w : weights) {
    if (!(w > 0) || !std::isfinite(w))
      throw InvalidArgument("a rank's weight is not positive and finite");
    total += w;
  }
  // One sample each, the rest in proportion: floors first, then the largest remainders.
  const uint64_t rest = global_batch - n;
  std::vector<uint64_t> shares(n, 1);
  std::vector<double> remainder(n);
  uint64_t given = 0;
  for (size_t r = 0; r < n; ++r) {
    const double exact = static_cast<double>(rest) * weights[r] / total;
    const uint64_t whole =
        std::min<uint64_t>(rest - given, static_cast<uint64_t>(std::floor(exact)));
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

ShareBalancer::ShareBalancer(int ranks, double hysteresis, int window, int warmup)
    : hysteresis_(hysteresis),
      window_(window),
      warmup_(warmup),
      recent_(static_cast<size_t>(std::max(ranks, 1))),
      rates_(recent_.size(), 0.0) {
  if (ranks < 1 || !(hysteresis >= 0) || window < 1 || warmup < 0) {
    throw InvalidArgument(
        "a share balancer needs ranks >= 1, hysteresis >= 0, a window of 1 step or more");
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
    std::vector<double>& recent = recent_[r];
    if (recent.size() == static_cast<size_t>(window_)) recent.erase(recent.begin());
    recent.push_back(static_cast<double>(samples[r]) / compute_seconds[r]);
    rates_[r] = median(recent);
  }
  ++observed_;
  // The step-to-step spread: each rank's median absolute deviation from its median rate,
  // scaled to a standard deviation (x 1.4826 for normal noise), relative to the median;
  // the largest over the ranks.
  spread_ = 0;
  for (size_t r = 0; r < rates_.size(); ++r) {
    std::vector<double> deviation;
    for (double x : recent_[r]) deviation.push_back(std::fabs(x - rates_[r]));
    spread_ = std::max(spread_, 1.4826 * median(deviation) / rates_[r]);
  }
}

std::optional<std::vector<uint64_t>> ShareBalancer::propose(
    const std::vector<uint64_t>& current) const {
  if (observed_ < std::max(warmup_, 1) || current.size() != rates_.size()) return std::nullopt;
  const uint64_t total = std::accumulate(current.begin(), current.end(), uint64_t{0});
  std::vector<uint64_t> target = proportional_shares(total, rates_);
  const double threshold = std::max(hysteresis_, spread_);
  for (size_t r = 0; r < current.size(); ++r) {
    const double moved =
        std::fabs(static_cast<double>(target[r]) - static_cast<double>(current[r]));
    if (moved >= 1 && moved > threshold * static_cast<double>(current[r])) return target;
  }
  return std::nullopt;
}

}  // namespace etr
