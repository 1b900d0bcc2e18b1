// TrainSession: the automatic global batch (batch.global_batch: auto; train_session.h,
// "Goodput"). Each step measures the gradient noise scale (parallel/goodput.h) from every
// rank's own gradient before the reduction (the bucket reducer sums its squares at each
// bucket's launch) and the reduced one; with one rank, from the step's first micro-batch
// against the whole step. The step times feed a model T(B) = a + c B. Every few steps the
// policy picks the B with the most goodput (samples/s x statistical efficiency) within
// [min_global_batch, max_global_batch]; the learning rate is optimizer.lr at the
// schedule's scale-invariant progress, times the rule's gain (AdaScale by default), and
// the run ends when that progress reaches schedule.max_steps. Every rank takes the same
// decision from the same numbers (all of them ride on the step's sums).
#include <algorithm>
#include <cmath>

#include "parallel/goodput.h"
#include "parallel/train_session.h"
#include "runtime/adamw.h"

namespace etr {

struct TrainSession::Goodput {
  Goodput(const GoodputSettings& s, LrScaling r) : policy(s), rule(r) {}
  GradientNoiseScale noise{0.95};
  StepTimeModel times;
  GoodputPolicy policy;
  LrScaling rule;
  ScaledProgress progress;
  double gain = 1;               // this step's learning-rate gain
  double first_sq = std::nan("");  // one rank: |gradient|^2 after the first micro-batch
  uint64_t first_samples = 0;
  double fixed_seconds = 0;      // the last step's optimizer (a fixed cost per step)
  int since_change = 0;          // steps since B last changed
  int decisions = 0;
};

void TrainSession::GoodputDeleter::operator()(Goodput* g) const { delete g; }

// The global batch of the first plan: batch.global_batch, or the range's low end (at
// least one sample per rank) when automatic; a resumed run takes the checkpoint's.
int64_t initial_global_batch(const TrainConfig& c, int dp) {
  if (c.batch().global_batch() > 0) return c.batch().global_batch();
  return std::clamp<int64_t>(c.batch().min_global_batch(), dp, std::max(c.batch().max_global_batch(), dp));
}

void TrainSession::setup_goodput() {
  if (config_.batch().global_batch() != 0) return;
  if (pipeline_) {
    throw ConfigError("batch.global_batch = auto does not combine with parallel.pp > 1 yet; "
                      "give the global batch a number with a pipeline.");
  }
  GoodputSettings s;
  s.min_batch = static_cast<uint64_t>(config_.batch().min_global_batch());
  s.max_batch = static_cast<uint64_t>(config_.batch().max_global_batch());
  s.world_size = grid_->dp_size();
  goodput_.reset(new Goodput(s, parse_lr_scaling(config_.batch().lr_scaling())));
  engine_->measure_local_norm(true);
  if (leader()) {
    log_.info("global batch: auto, from ", plan_->global_batch(), " in [", s.min_batch, ", ",
              s.max_batch, "], learning rate scaled by ", config_.batch().lr_scaling(),
              " from optimizer.lr at ", s.min_batch, " sequences");
  }
}

bool TrainSession::finished() const {
  if (goodput_) return goodput_->progress.progress >= static_cast<double>(config_.schedule().max_steps());
  return static_cast<int64_t>(position_.step) >= config_.schedule().max_steps();
}

double TrainSession::progress_fraction() const {
  const double total = static_cast<double>(config_.schedule().max_steps());
  if (total <= 0) return 1;
  const double done = goodput_ ? goodput_->progress.progress : static_cast<double>(position_.step);
  return std::clamp(done / total, 0.0, 1.0);
}

// The step's learning rate: the schedule at the scale-invariant progress, times the gain
// of the current B (from the noise scale measured so far); the progress then advances.
double TrainSession::goodput_learning_rate() {
  const auto& s = config_.schedule();
  const double base = learning_rate_at(goodput_->progress.progress, config_.optimizer().lr(),
                                       s.warmup_steps(), s.max_steps(), s.min_lr_ratio());
  const double b0 = static_cast<double>(config_.batch().min_global_batch());
  const double noise = goodput_->noise.noise_scale().value_or(0.0);
  goodput_->gain = goodput_->progress.advance(goodput_->rule, static_cast<double>(plan_->global_batch()), b0, noise);
  return base * goodput_->gain;
}

// One rank: the squared norm of the gradient after the first of k >= 2 micro-batches.
void TrainSession::goodput_first_micro_batch(uint64_t samples) {
  if (!goodput_ || grid_->dp_size() > 1) return;
  goodput_->first_sq = gradient_sq_norm(engine_->gradients(), model_.stack->layout().numel());
  goodput_->first_samples = samples;
}

// This rank's n_r |g_r|^2 for the step's sums (g_r: the mean gradient of its samples).
double TrainSession::goodput_local_term() const {
  const uint64_t B = plan_->global_batch(), n = rank_batch().samples();
  if (grid_->dp_size() == 1) return 0;
  return static_cast<double>(n) * mean_gradient_sq_norm(engine_->local_grad_sq_norm(), n, B);
}

// After the step, with the sums every rank shares: the noise sample, the step time, and
// every few steps the decision.
void TrainSession::goodput_after_step(double grad_norm, double weighted_sum, double seconds,
                                      double fixed_seconds) {
  Goodput& g = *goodput_;
  const uint64_t B = plan_->global_batch();
  const double global_sq = grad_norm * grad_norm;
  if (grid_->dp_size() > 1) {
    g.noise.update(data_parallel_sample(weighted_sum, grid_->dp_size(), B, global_sq));
  } else if (std::isfinite(g.first_sq)) {
    g.noise.update(micro_batch_sample(mean_gradient_sq_norm(g.first_sq, g.first_samples, B),
                                      g.first_samples, global_sq, B));
  }
  g.first_sq = std::nan("");
  if (++g.since_change > 1) g.times.observe(B, seconds, fixed_seconds);  // not the first at a new B
  constexpr int kEvery = 5;  // steps between decisions
  const auto noise = g.noise.noise_scale();
  const auto fit = g.times.fit();
  if (g.since_change < kEvery || !noise || !fit || g.noise.updates() < kEvery) return;
  const GoodputDecision d = g.policy.decide(B, *noise, *fit);
  ++g.decisions;
  if (leader()) {
    const std::string text = to_text("step ", position_.step, ": ", d.describe());
    log_.info(text);
    report_decision(position_.step, "batch/decisions", text);
  }
  if (!d.changed()) {
    g.since_change = 0;
    return;
  }
  set_global_batch(d.batch);
}

void TrainSession::set_global_batch(uint64_t B) {
  release_activations();
  plan_.emplace(plan_data_parallel_batch(static_cast<int64_t>(B), grid_->dp_size(), 1, data_->train_samples()));
  set_micro_batch(agree_micro_batch(fit_micro_batch(micro_batch_cap())));
  const int64_t T = config_.model().seq_len();
  inputs_.resize(static_cast<size_t>((static_cast<int64_t>(rank_batch().samples()) + micro_batch_cap()) * T));
  targets_.resize(inputs_.size());
  batch_origin_ = {position_.step, position_.samples_seen};  // samples_seen from here: B per step
  goodput_->since_change = 0;
}

double TrainSession::noise_scale() const {
  return goodput_ ? goodput_->noise.noise_scale().value_or(std::nan("")) : std::nan("");
}

double TrainSession::schedule_progress() const {
  return goodput_ ? goodput_->progress.progress : static_cast<double>(position_.step);
}

ckpt::BatchPolicy TrainSession::batch_policy_state() const {
  ckpt::BatchPolicy b;
  b.set_global_batch(static_cast<int64_t>(plan_->global_batch()));
  b.set_micro_batch(config_.batch().micro_batch());
  if (goodput_) {
    b.set_auto_global_batch(true);
    b.set_schedule_progress(goodput_->progress.progress);
    const NoiseScaleState& n = goodput_->noise.state();
    b.set_noise_grad_sq_ema(n.grad_sq_ema);
    b.set_noise_trace_ema(n.trace_ema);
    b.set_noise_updates(n.updates);
  }
  return b;
}

// A resumed automatic global batch: the checkpoint's B, progress and noise averages (the
// step times are measured again: the world may differ).
void TrainSession::restore_batch_policy(const ckpt::BatchPolicy& saved) {
  if (!goodput_ || !saved.auto_global_batch()) return;
  const uint64_t B = goodput_->policy.legal_batch(static_cast<uint64_t>(saved.global_batch()));
  if (B != plan_->global_batch()) set_global_batch(B);
  goodput_->progress.progress = saved.schedule_progress();
  NoiseScaleState n = goodput_->noise.state();
  n.grad_sq_ema = saved.noise_grad_sq_ema();
  n.trace_ema = saved.noise_trace_ema();
  n.updates = saved.noise_updates();
  goodput_->noise.restore(n);
}

}  // namespace etr
