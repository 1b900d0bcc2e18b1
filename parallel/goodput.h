// The statistics behind the adaptive global batch (batch.global_batch: auto): how noisy
// the gradient is, how much a larger batch is worth per sample, how long a step of B
// samples takes, which B to train at, and how the learning rate follows B. Pure functions
// and small classes: no MPI, no I/O; the training session measures and wires them in.
//
//   gradient noise scale  B_noise = tr(Sigma) / |G|^2   (McCandlish et al. 2018, "An
//                         Empirical Model of Large-Batch Training", section 2.2, appendix A)
//   statistical efficiency E(B) = (B_noise + B0) / (B_noise + B)   (Pollux: Qiao et al.,
//                         OSDI 2021, section 3.1; B0 = batch.min_global_batch)
//   step time             T(B) = a + c B   (least squares over recent steps)
//   goodput               goodput(B) = B / T(B) * E(B)   (useful samples per second)
//   learning rate         lr(B) = optimizer.lr * r(B): linear, sqrt, or AdaScale's gain
//                         (Johnson et al. 2020) with the schedule run on scale-invariant
//                         progress.
//
// Here G is the true (full-data) gradient, Sigma the covariance of one sample's gradient,
// so a mean gradient over b samples g_b has E|g_b|^2 = |G|^2 + tr(Sigma) / b.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace etr {

// ---------------------------------------------------------------------------------------
// 1. Gradient noise scale.

// One step's pair of gradient measurements: a small batch and the step's whole batch.
// small_sq_norm estimates |G|^2 + tr(Sigma) / small_batch, big_sq_norm |G|^2 +
// tr(Sigma) / big_batch (small_batch may be an effective size: data_parallel_sample).
struct NoiseSample {
  double small_sq_norm = 0;
  double small_batch = 0;
  double big_sq_norm = 0;
  double big_batch = 0;
};

// A rank's gradient before the reduction: sq_norm = |g_r|^2, g_r the MEAN gradient of its
// `samples` samples (not the 1/B-weighted contribution: see mean_gradient_sq_norm).
struct RankGradient {
  uint64_t samples = 0;
  double sq_norm = 0;
};

// |g|^2 of the mean gradient of n samples from the squared norm of its contribution to a
// step whose loss weights each sample by 1/B (etr's loss: the buffer holds (n/B) g):
// (B/n)^2 * contribution_sq_norm.
double mean_gradient_sq_norm(double contribution_sq_norm, uint64_t samples, uint64_t global_batch);

// The data-parallel pair: the small batches are the ranks' local gradients, the big one
// the reduced gradient over B = sum n_r. Ranks with no sample are skipped. nullopt with
// fewer than two ranks holding samples (there is no small batch).
std::optional<NoiseSample> data_parallel_sample(std::span<const RankGradient> ranks,
                                                double global_sq_norm);
// The same from reduced numbers: weighted_sq_norm_sum = sum_r n_r |g_r|^2 (one scalar
// allreduce), `ranks` = the ranks with n_r >= 1, global_batch = B.
std::optional<NoiseSample> data_parallel_sample(double weighted_sq_norm_sum, int ranks,
                                                uint64_t global_batch, double global_sq_norm);
// The one-rank pair: the mean gradient of the step's first micro-batch alone (b_1 samples)
// against the mean gradient of the whole step (B samples). nullopt unless 1 <= b_1 < B.
std::optional<NoiseSample> micro_batch_sample(double first_sq_norm, uint64_t first_samples,
                                              double step_sq_norm, uint64_t step_samples);

// Unbiased one-step estimates of |G|^2 and tr(Sigma) from a pair (either may be negative:
// they are noisy). nullopt when the pair is unusable (sizes, NaN or inf).
struct NoiseEstimate {
  double grad_sq = 0;  // |G|^2
  double trace = 0;    // tr(Sigma)
};
std::optional<NoiseEstimate> estimate_noise(const NoiseSample& s);

// What a checkpoint saves of GradientNoiseScale (bit-exact resume).
struct NoiseScaleState {
  double grad_sq_ema = 0;  // raw (not bias-corrected) moving averages
  double trace_ema = 0;
  uint64_t updates = 0;  // accepted steps
  uint64_t ignored = 0;  // steps refused (NaN, inf, unusable sizes)
};

// The smoothed noise scale: exponential moving averages of |G|^2 and tr(Sigma), kept
// separately and bias-corrected as in Adam (Kingma & Ba 2015): m_t = beta m_{t-1} +
// (1 - beta) x_t, reported as m_t / (1 - beta^t). B_noise is the ratio of the two
// averages (not the average of per-step ratios, whose denominator is often near 0).
class GradientNoiseScale {
 public:
  // B_noise is reported in [0, kMaxNoiseScale]: the top when the |G|^2 average is <= 0
  // (all noise: any batch is efficient), 0 when the tr(Sigma) average is <= 0.
  static constexpr double kMaxNoiseScale = 1e12;

  // smoothing = beta in [0, 1); InvalidArgument otherwise.
  explicit GradientNoiseScale(double smoothing = 0.95);

  // Adds one step; false (and nothing changes but ignored()) when the pair is unusable.
  bool update(const NoiseSample& s);
  bool update(const std::optional<NoiseSample>& s);

  bool has_estimate() const { return state_.updates > 0; }
  // Bias-corrected averages; 0 before the first update.
  double grad_sq() const;
  double trace() const;
  // B_noise, nullopt before the first update.
  std::optional<double> noise_scale() const;
  uint64_t updates() const { return state_.updates; }
  uint64_t ignored() const { return state_.ignored; }

  const NoiseScaleState& state() const { return state_; }
  void restore(const NoiseScaleState& s) { state_ = s; }

 private:
  double bias_correction() const;  // 1 - beta^t
  double beta_;
  NoiseScaleState state_;
};

// ---------------------------------------------------------------------------------------
// 2. Statistical efficiency E(B) = (B_noise + B0) / (B_noise + B): the progress one sample
// makes at batch B relative to one at B0 (1 at B0, falls towards B0 / B when B >> B_noise).
double statistical_efficiency(double noise_scale, double batch, double base_batch);

// ---------------------------------------------------------------------------------------
// 3. Step time T(B) = a + c B.
struct StepTimeFit {
  double fixed_seconds = 0;       // a >= 0: per-step cost independent of B
  double seconds_per_sample = 0;  // c > 0
  int batch_sizes = 0;            // distinct B behind the fit (1: a was assumed)
  double seconds(double batch) const { return fixed_seconds + seconds_per_sample * batch; }
  double throughput(double batch) const { return batch / seconds(batch); }
};

struct StepObservation {
  uint64_t batch = 0;
  double seconds = 0;
  double fixed_seconds = 0;  // the measured B-independent part, 0 when not measured
};

// Least squares of seconds on batch with a >= 0 and c > 0 (see goodput.cc). With one
// distinct B, a is the mean measured fixed_seconds (0 when none: time proportional to
// B). nullopt with no observation.
std::optional<StepTimeFit> fit_step_time(std::span<const StepObservation> obs);

// The recent observations behind the fit: the last per_batch steps at each B, for the
// max_batches most recently observed B (a long stay at one B keeps what was learnt at the
// others).
class StepTimeModel {
 public:
  explicit StepTimeModel(size_t per_batch = 16, size_t max_batches = 8);
  // false (ignored) when batch is 0 or seconds is not finite and > 0.
  bool observe(uint64_t batch, double seconds, double fixed_seconds = 0);
  std::optional<StepTimeFit> fit() const;
  size_t observations() const;
  void clear() { series_.clear(); }

 private:
  struct Series {
    uint64_t batch = 0;
    uint64_t last_seen = 0;
    std::vector<StepObservation> ring;  // at most per_batch_
    size_t next = 0;
  };
  size_t per_batch_;
  size_t max_batches_;
  uint64_t clock_ = 0;
  std::vector<Series> series_;
};

// goodput(B) = B / T(B) * E(B): samples per second weighted by their statistical worth.
double goodput(double batch, double noise_scale, double base_batch, const StepTimeFit& fit);

// ---------------------------------------------------------------------------------------
// 4. The decision.
struct GoodputSettings {
  uint64_t min_batch = 8;    // batch.min_global_batch: also B0
  uint64_t max_batch = 256;  // batch.max_global_batch
  int world_size = 1;        // data-parallel ranks: B >= world_size
  double hysteresis = 0.05;  // move only when goodput would rise by more than this fraction
};

struct GoodputDecision {
  uint64_t current_batch = 0;
  uint64_t batch = 0;  // the chosen B (== current_batch: hold)
  double noise_scale = 0;
  StepTimeFit fit;
  double current_goodput = 0;  // predicted, samples/s x efficiency
  double goodput = 0;          // predicted at `batch`
  double efficiency = 0;       // E(batch)
  uint64_t best_batch = 0;     // the best candidate, even when hysteresis held
  double best_goodput = 0;
  double hysteresis = 0;
  bool changed() const { return batch != current_batch; }
  // goodput / current_goodput - 1.
  double gain() const;
  // "global batch 16 -> 32: noise scale 74, efficiency 0.83, goodput +21%", or
  // "global batch 16 held: noise scale 74, efficiency 0.95; 32 would gain +3% (< 5%)".
  std::string describe() const;
};

class GoodputPolicy {
 public:
  // InvalidArgument when min_batch is 0, max < min, world_size < 1 or hysteresis < 0.
  explicit GoodputPolicy(const GoodputSettings& s);

  // The grid: powers of two and 1.5 times powers of two (1, 2, 3, 4, 6, 8, 12, ...) in
  // [lo, hi], lo = max(min_batch, world_size), hi = max(max_batch, lo), plus lo and hi.
  const std::vector<uint64_t>& candidates() const { return candidates_; }
  // B clamped into [lo, hi]: the batch to use while there is no estimate yet.
  uint64_t legal_batch(uint64_t batch) const;

  // The best candidate by predicted goodput; it replaces current_batch only when its
  // goodput beats the current one's by more than the hysteresis, or when current_batch is
  // outside [lo, hi] (then the best candidate, whatever the gain). noise_scale >= 0 (from
  // GradientNoiseScale), fit from StepTimeModel; InvalidArgument otherwise. A few dozen
  // candidates: microseconds.
  GoodputDecision decide(uint64_t current_batch, double noise_scale, const StepTimeFit& fit) const;

  const GoodputSettings& settings() const { return settings_; }

 private:
  GoodputSettings settings_;
  uint64_t lo_;
  uint64_t hi_;
  std::vector<uint64_t> candidates_;
};

// ---------------------------------------------------------------------------------------
// 5. Learning-rate scaling (batch.lr_scaling; optimizer.lr is the rate at B0).
enum class LrScaling { kLinear, kSqrt, kAdaScale };
// "linear", "sqrt", "adascale"; ConfigError otherwise.
LrScaling parse_lr_scaling(std::string_view name);
const char* lr_scaling_name(LrScaling rule);

// AdaScale's gain r = (B_noise/B0 + 1) / (B_noise/B + 1), in [1, B/B0] for B >= B0 (the
// derivation is in goodput.cc).
double adascale_gain(double batch, double base_batch, double noise_scale);
// The learning-rate multiplier r: B/B0, sqrt(B/B0) or adascale_gain. A NaN or negative
// noise scale counts as 0 (AdaScale then keeps the base rate).
double lr_gain(LrScaling rule, double batch, double base_batch, double noise_scale);

// The learning-rate schedule's clock in base-batch steps (a double: it replaces the
// integer step in the schedule and is saved in checkpoints). Each optimizer step at B
// advances it by AdaScale's gain r (its scale-invariant iterations: tau += r), or by B/B0
// under linear and sqrt (the samples seen, in base batches: the same epochs as at B0).
// The step's rate is schedule(progress before the step) * gain.
struct ScaledProgress {
  double progress = 0;
  // Returns the step's gain and advances progress.
  double advance(LrScaling rule, double batch, double base_batch, double noise_scale);
};

}  // namespace etr
