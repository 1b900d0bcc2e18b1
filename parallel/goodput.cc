// The adaptive global batch's statistics (see goodput.h for the model and the papers).
#include "parallel/goodput.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "runtime/error.h"

namespace etr {
namespace {

bool finite(double x) {
  return std::isfinite(x);
}

// "74", "3.2", "1e+12": a noise scale or batch for the log.
std::string short_number(double x) {
  char buf[32];
  if (x >= 1e7) {
    std::snprintf(buf, sizeof buf, "%.2g", x);
  } else if (x >= 10) {
    std::snprintf(buf, sizeof buf, "%.0f", x);
  } else {
    std::snprintf(buf, sizeof buf, "%.2g", x);
  }
  return buf;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// 1. Gradient noise scale.
//
// The model (McCandlish et al. 2018, appendix A): per-sample gradients are independent
// with mean G and covariance Sigma, so the mean gradient g_b of b samples has
//
//   E|g_b|^2 = |G|^2 + tr(Sigma) / b.                                              (1)
//
// Two measurements in one step, a small batch S = |g_small|^2 of size b_s and the big one
// L = |g_B|^2 of size B, give two linear equations in |G|^2 and tr(Sigma); solved,
//
//   tr(Sigma) ~ (S - L) / (1/b_s - 1/B),     |G|^2 ~ (B L - b_s S) / (B - b_s),     (2)
//
// unbiased because they are linear in S and L (the ratio of the two is not; that is why
// GradientNoiseScale averages the two separately and divides the averages).
//
// Data parallel with unequal shares n_r (B = sum_r n_r over R ranks). g_r is the mean of
// rank r's n_r samples and g_B = sum_r n_r g_r / B. For any weights w_r summing to 1,
// by (1) E[sum_r w_r |g_r|^2] = |G|^2 + tr(Sigma) sum_r w_r / n_r: the weighted average
// is the small-batch norm of a batch of effective size b_s with 1/b_s = sum_r w_r / n_r.
// We weight each rank by its samples, w_r = n_r / B (each sample counts once, as in g_B):
//
//   S = sum_r n_r |g_r|^2 / B,     1/b_s = sum_r (n_r / B) / n_r = R / B,     b_s = B / R,
//
// the mean share, whatever the split; (2) then holds as is. Equal weights w_r = 1/R would
// be unbiased too (with 1/b_s = mean_r 1/n_r), but they give a rank of few samples, whose
// |g_r|^2 is the noisiest, as much say as a large one; n_r weights also need only one
// scalar allreduce (sum_r n_r |g_r|^2). Here S - L = sum_r n_r |g_r - g_B|^2 / B >= 0, so
// the tr(Sigma) estimate is never negative. R = 1 gives b_s = B: no information, and
// the session must use a micro-batch instead (micro_batch_sample: b_s = b_1 samples of
// the first micro-batch, B the step).

double mean_gradient_sq_norm(double contribution_sq_norm, uint64_t samples, uint64_t global_batch) {
  if (samples == 0) return 0;
  const double scale = static_cast<double>(global_batch) / static_cast<double>(samples);
  return contribution_sq_norm * scale * scale;
}

std::optional<NoiseSample> data_parallel_sample(std::span<const RankGradient> ranks,
                                                double global_sq_norm) {
  double weighted = 0;
  uint64_t batch = 0;
  int holding = 0;
  for (const RankGradient& r : ranks) {
    if (r.samples == 0) continue;
    weighted += static_cast<double>(r.samples) * r.sq_norm;
    batch += r.samples;
    ++holding;
  }
  return data_parallel_sample(weighted, holding, batch, global_sq_norm);
}

std::optional<NoiseSample> data_parallel_sample(double weighted_sq_norm_sum, int ranks,
                                                uint64_t global_batch, double global_sq_norm) {
  if (ranks < 2 || global_batch < static_cast<uint64_t>(ranks)) return std::nullopt;
  const double b = static_cast<double>(global_batch);
  return NoiseSample{weighted_sq_norm_sum / b, b / ranks, global_sq_norm, b};
}

std::optional<NoiseSample> micro_batch_sample(double first_sq_norm, uint64_t first_samples,
                                              double step_sq_norm, uint64_t step_samples) {
  if (first_samples == 0 || first_samples >= step_samples) return std::nullopt;
  return NoiseSample{first_sq_norm, static_cast<double>(first_samples), step_sq_norm,
                     static_cast<double>(step_samples)};
}

std::optional<NoiseEstimate> estimate_noise(const NoiseSample& s) {
  if (!finite(s.small_sq_norm) || !finite(s.big_sq_norm) || !finite(s.small_batch) ||
      !finite(s.big_batch) || s.small_sq_norm < 0 || s.big_sq_norm < 0 || !(s.small_batch > 0) ||
      !(s.big_batch > s.small_batch)) {
    return std::nullopt;
  }
  const double inv_gap = 1 / s.small_batch - 1 / s.big_batch;
  NoiseEstimate e;
  e.trace = (s.small_sq_norm - s.big_sq_norm) / inv_gap;
  e.grad_sq = (s.big_batch * s.big_sq_norm - s.small_batch * s.small_sq_norm) /
              (s.big_batch - s.small_batch);
  if (!finite(e.trace) || !finite(e.grad_sq)) return std::nullopt;
  return e;
}

GradientNoiseScale::GradientNoiseScale(double smoothing) : beta_(smoothing) {
  if (!(smoothing >= 0 && smoothing < 1)) {
    throw InvalidArgument("the noise scale's smoothing factor " + std::to_string(smoothing) +
                          " is not in [0, 1)");
  }
}

bool GradientNoiseScale::update(const std::optional<NoiseSample>& s) {
  if (!s) {
    ++state_.ignored;
    return false;
  }
  return update(*s);
}

bool GradientNoiseScale::update(const NoiseSample& s) {
  const std::optional<NoiseEstimate> e = estimate_noise(s);
  if (!e) {
    ++state_.ignored;
    return false;
  }
  state_.grad_sq_ema = beta_ * state_.grad_sq_ema + (1 - beta_) * e->grad_sq;
  state_.trace_ema = beta_ * state_.trace_ema + (1 - beta_) * e->trace;
  ++state_.updates;
  return true;
}

double GradientNoiseScale::bias_correction() const {
  return 1 - std::pow(beta_, static_cast<double>(state_.updates));
}

double GradientNoiseScale::grad_sq() const {
  return has_estimate() ? state_.grad_sq_ema / bias_correction() : 0;
}

double GradientNoiseScale::trace() const {
  return has_estimate() ? state_.trace_ema / bias_correction() : 0;
}

std::optional<double> GradientNoiseScale::noise_scale() const {
  if (!has_estimate()) return std::nullopt;
  const double g = grad_sq();
  const double t = trace();
  if (!(t > 0)) return 0.0;  // no measurable noise: small batches are as good as any
  // |G|^2 <= 0 is a noisy estimate of a gradient small next to the noise: B_noise large.
  if (!(g > 0) || t >= kMaxNoiseScale * g) return kMaxNoiseScale;
  return t / g;
}

// ---------------------------------------------------------------------------------------
// 2. Statistical efficiency (Pollux, Qiao et al. 2021, eq. 4 with McCandlish's model): to
// reach a given loss, B samples per step need (1 + B_noise / B) times fewer steps than
// one sample per step, so per sample E(B) = (B_noise + B0) / (B_noise + B) relative to B0.
double statistical_efficiency(double noise_scale, double batch, double base_batch) {
  return (noise_scale + base_batch) / (noise_scale + batch);
}

// ---------------------------------------------------------------------------------------
// 3. Step time: least squares of t on B over the observations, under a >= 0 and c > 0.
// The objective is a convex quadratic in (a, c), so when the free minimum breaks a
// constraint the constrained one lies on that constraint's boundary:
//   a < 0  -> a = 0, c = sum B t / sum B^2 (then c > 0: every t > 0; and a < 0 needs
//             c > 0 at the free minimum, so the two cannot both break);
//   c <= 0 -> c = 0+ (a tiny fraction of the proportional slope), a = mean t - c mean B.
// One distinct B cannot separate a from c: a is the measured fixed part (kept below the
// step time), 0 when not measured, i.e. T(B) proportional to B.
std::optional<StepTimeFit> fit_step_time(std::span<const StepObservation> obs) {
  double n = 0, sum_b = 0, sum_t = 0, sum_fixed = 0;
  std::vector<uint64_t> batches;
  for (const StepObservation& o : obs) {
    if (o.batch == 0 || !finite(o.seconds) || !(o.seconds > 0)) continue;
    n += 1;
    sum_b += static_cast<double>(o.batch);
    sum_t += o.seconds;
    sum_fixed += finite(o.fixed_seconds) ? std::max(o.fixed_seconds, 0.0) : 0.0;
    batches.push_back(o.batch);
  }
  if (n == 0) return std::nullopt;
  std::sort(batches.begin(), batches.end());
  StepTimeFit f;
  f.batch_sizes = static_cast<int>(std::unique(batches.begin(), batches.end()) - batches.begin());
  const double mean_b = sum_b / n, mean_t = sum_t / n;
  if (f.batch_sizes == 1) {
    f.fixed_seconds = std::min(sum_fixed / n, 0.999 * mean_t);
    f.seconds_per_sample = (mean_t - f.fixed_seconds) / mean_b;
    return f;
  }
  double sbb = 0, sbt = 0, sb2 = 0, sbt0 = 0;  // centred, then raw second moments
  for (const StepObservation& o : obs) {
    if (o.batch == 0 || !finite(o.seconds) || !(o.seconds > 0)) continue;
    const double b = static_cast<double>(o.batch);
    sbb += (b - mean_b) * (b - mean_b);
    sbt += (b - mean_b) * (o.seconds - mean_t);
    sb2 += b * b;
    sbt0 += b * o.seconds;
  }
  constexpr double kMinSlope = 1e-3;  // of the proportional slope mean t / mean B
  f.seconds_per_sample = sbt / sbb;
  f.fixed_seconds = mean_t - f.seconds_per_sample * mean_b;
  if (!(f.seconds_per_sample > 0)) {
    f.seconds_per_sample = kMinSlope * mean_t / mean_b;
    f.fixed_seconds = mean_t - f.seconds_per_sample * mean_b;
  } else if (f.fixed_seconds < 0) {
    f.fixed_seconds = 0;
    f.seconds_per_sample = sbt0 / sb2;
  }
  return f;
}

StepTimeModel::StepTimeModel(size_t per_batch, size_t max_batches)
    : per_batch_(std::max<size_t>(per_batch, 1)), max_batches_(std::max<size_t>(max_batches, 1)) {}

bool StepTimeModel::observe(uint64_t batch, double seconds, double fixed_seconds) {
  if (batch == 0 || !finite(seconds) || !(seconds > 0)) return false;
  ++clock_;
  auto it = std::find_if(series_.begin(), series_.end(),
                         [batch](const Series& s) { return s.batch == batch; });
  if (it == series_.end()) {
    if (series_.size() == max_batches_) {  // forget the least recently observed B
      series_.erase(std::min_element(
          series_.begin(), series_.end(),
          [](const Series& x, const Series& y) { return x.last_seen < y.last_seen; }));
    }
    series_.push_back(Series{batch, 0, {}, 0});
    it = series_.end() - 1;
  }
  const StepObservation o{batch, seconds, finite(fixed_seconds) ? fixed_seconds : 0.0};
  if (it->ring.size() < per_batch_) {
    it->ring.push_back(o);
  } else {
    it->ring[it->next] = o;
    it->next = (it->next + 1) % per_batch_;
  }
  it->last_seen = clock_;
  return true;
}

std::optional<StepTimeFit> StepTimeModel::fit() const {
  std::vector<StepObservation> all;
  all.reserve(observations());
  for (const Series& s : series_) all.insert(all.end(), s.ring.begin(), s.ring.end());
  return fit_step_time(all);
}

size_t StepTimeModel::observations() const {
  size_t n = 0;
  for (const Series& s : series_) n += s.ring.size();
  return n;
}

double goodput(double batch, double noise_scale, double base_batch, const StepTimeFit& fit) {
  return fit.throughput(batch) * statistical_efficiency(noise_scale, batch, base_batch);
}

// ---------------------------------------------------------------------------------------
// 4. The decision.

double GoodputDecision::gain() const {
  return current_goodput > 0 ? goodput / current_goodput - 1 : 0;
}

std::string GoodputDecision::describe() const {
  char buf[256];
  const std::string noise = short_number(noise_scale);
  if (changed()) {
    std::snprintf(buf, sizeof buf,
                  "global batch %llu -> %llu: noise scale %s, efficiency %.2f, goodput %+.0f%%",
                  static_cast<unsigned long long>(current_batch),
                  static_cast<unsigned long long>(batch), noise.c_str(), efficiency, 100 * gain());
    return buf;
  }
  int n = std::snprintf(buf, sizeof buf, "global batch %llu held: noise scale %s, efficiency %.2f",
                        static_cast<unsigned long long>(current_batch), noise.c_str(), efficiency);
  if (best_batch != current_batch && n > 0 && current_goodput > 0) {
    std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n),
                  "; %llu would gain %+.0f%% (< %.0f%%)",
                  static_cast<unsigned long long>(best_batch),
                  100 * (best_goodput / current_goodput - 1), 100 * hysteresis);
  }
  return buf;
}

GoodputPolicy::GoodputPolicy(const GoodputSettings& s) : settings_(s) {
  if (s.min_batch == 0 || s.max_batch < s.min_batch || s.world_size < 1 || !(s.hysteresis >= 0)) {
    throw InvalidArgument("the goodput policy needs 1 <= min_batch (" +
                          std::to_string(s.min_batch) + ") <= max_batch (" +
                          std::to_string(s.max_batch) + "), world_size (" +
                          std::to_string(s.world_size) + ") >= 1 and hysteresis >= 0");
  }
  // Every rank needs a sample: B >= world_size, even above max_batch.
  lo_ = std::max<uint64_t>(s.min_batch, static_cast<uint64_t>(s.world_size));
  hi_ = std::max(s.max_batch, lo_);
  candidates_ = {lo_, hi_};
  for (uint64_t p = 1;; p *= 2) {
    if (p >= lo_ && p <= hi_) candidates_.push_back(p);
    if (p >= 2 && p / 2 * 3 >= lo_ && p / 2 * 3 <= hi_) candidates_.push_back(p / 2 * 3);
    if (p > hi_ / 2) break;
  }
  std::sort(candidates_.begin(), candidates_.end());
  candidates_.erase(std::unique(candidates_.begin(), candidates_.end()), candidates_.end());
}

uint64_t GoodputPolicy::legal_batch(uint64_t batch) const {
  return std::clamp(batch, lo_, hi_);
}

GoodputDecision GoodputPolicy::decide(uint64_t current_batch, double noise_scale,
                                      const StepTimeFit& fit) const {
  if (!finite(noise_scale) || noise_scale < 0 || !finite(fit.fixed_seconds) ||
      fit.fixed_seconds < 0 || !finite(fit.seconds_per_sample) || !(fit.seconds_per_sample > 0)) {
    throw InvalidArgument(
        "the goodput policy needs a noise scale >= 0 and a step-time fit "
        "with a >= 0 and c > 0");
  }
  const double b0 = static_cast<double>(settings_.min_batch);
  GoodputDecision d;
  d.current_batch = current_batch;
  d.noise_scale = noise_scale;
  d.fit = fit;
  d.hysteresis = settings_.hysteresis;
  d.current_goodput = goodput(static_cast<double>(current_batch), noise_scale, b0, fit);
  d.best_batch = candidates_.front();
  d.best_goodput = -1;
  for (uint64_t b : candidates_) {  // ties go to the smaller batch
    const double g = goodput(static_cast<double>(b), noise_scale, b0, fit);
    if (g > d.best_goodput) {
      d.best_goodput = g;
      d.best_batch = b;
    }
  }
  const bool legal = current_batch >= lo_ && current_batch <= hi_;
  const bool worth = d.best_goodput > d.current_goodput * (1 + settings_.hysteresis);
  d.batch = (!legal || worth) ? d.best_batch : current_batch;
  d.goodput = d.batch == d.best_batch ? d.best_goodput : d.current_goodput;
  d.efficiency = statistical_efficiency(noise_scale, static_cast<double>(d.batch), b0);
  return d;
}

// ---------------------------------------------------------------------------------------
// 5. Learning-rate scaling.
//
// AdaScale (Johnson, Agrawal, Gu & Guestrin, ICML 2020, "AdaScale SGD") scales the rate
// of a batch S times the base one by the gain ratio
//
//   r = (sigma^2 + mu^2) / (sigma^2 / S + mu^2),
//
// sigma^2 = E|g - grad F|^2 the variance of one base-batch gradient, mu^2 = |grad F|^2,
// and runs the schedule on tau += r. With base batch B0: sigma^2 = tr(Sigma) / B0,
// mu^2 = |G|^2, S = B / B0; dividing through by mu^2 and B_noise = tr(Sigma) / |G|^2,
//
//   r = (B_noise / B0 + 1) / (B_noise / B + 1):
//
// 1 when B_noise -> 0 (no noise to average away), S when B_noise -> inf (linear scaling),
// between the two otherwise (for B < B0 the same formula gives r in [S, 1]).

LrScaling parse_lr_scaling(std::string_view name) {
  if (name == "linear") return LrScaling::kLinear;
  if (name == "sqrt") return LrScaling::kSqrt;
  if (name == "adascale") return LrScaling::kAdaScale;
  throw ConfigError("batch.lr_scaling = \"" + std::string(name) +
                    "\" is not adascale, sqrt or linear.");
}

const char* lr_scaling_name(LrScaling rule) {
  switch (rule) {
    case LrScaling::kLinear:
      return "linear";
    case LrScaling::kSqrt:
      return "sqrt";
    case LrScaling::kAdaScale:
      return "adascale";
  }
  return "?";
}

double adascale_gain(double batch, double base_batch, double noise_scale) {
  if (!(noise_scale > 0)) return 1;  // also NaN: keep the base rate
  if (!finite(noise_scale)) return batch / base_batch;
  return (noise_scale / base_batch + 1) / (noise_scale / batch + 1);
}

double lr_gain(LrScaling rule, double batch, double base_batch, double noise_scale) {
  if (!(batch > 0) || !(base_batch > 0)) {
    throw InvalidArgument("learning-rate scaling needs batch sizes > 0, not " +
                          std::to_string(batch) + " and " + std::to_string(base_batch));
  }
  switch (rule) {
    case LrScaling::kLinear:
      return batch / base_batch;
    case LrScaling::kSqrt:
      return std::sqrt(batch / base_batch);
    case LrScaling::kAdaScale:
      return adascale_gain(batch, base_batch, noise_scale);
  }
  return 1;
}

double ScaledProgress::advance(LrScaling rule, double batch, double base_batch,
                               double noise_scale) {
  const double r = lr_gain(rule, batch, base_batch, noise_scale);
  progress += rule == LrScaling::kAdaScale ? r : batch / base_batch;
  return r;
}

}  // namespace etr
