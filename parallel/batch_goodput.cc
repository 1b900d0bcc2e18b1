// BatchController (batch_controller.h): the decisions that follow measurements.
//
// The automatic global batch (batch.global_batch: auto). Each step measures the gradient
// noise scale (parallel/goodput.h) from every rank's own gradient before the reduction (the
// bucket reducer sums its squares at each bucket's launch) and the reduced one; with one
// rank, from the step's first micro-batch against the whole step. The step times feed a
// model T(B) = a + c B. Every few steps the policy picks the B with the most goodput
// (samples/s x statistical efficiency) within [min_global_batch, max_global_batch]; the
// learning rate is optimizer.lr at the schedule's scale-invariant progress, times the
// rule's gain (AdaScale by default), and the run ends when that progress reaches
// schedule.max_steps.
//
// The shares (batch.shares = throughput): each rank's share follows its measured speed
// (parallel/share_balancer.h), re-balanced at step boundaries.
//
// The recomputation trial: with runtime.recompute = auto and an automatic micro-batch,
// recomputation is also tried when it lets a larger micro-batch fit: after a warm-up step,
// two steps at the largest micro-batch without it, then (after another warm-up step) two
// at the largest with it; the faster per sample is kept, recomputation only when it wins
// by more than 3 %. (At b = 1 it is turned on anyway when nothing else fits.)
//
// Every rank takes the same decisions from the same numbers: all of them ride on the
// step's sums (StepOutcome), or are gathered here.
#include <algorithm>
#include <cmath>

#include "parallel/batch_controller.h"
#include "parallel/goodput.h"
#include "parallel/step_report.h"
#include "runtime/adamw.h"

namespace etr {

struct BatchController::Goodput {
  Goodput(const GoodputSettings& s, LrScaling r) : policy(s), rule(r) {}
  GradientNoiseScale noise{0.95};
  StepTimeModel times;
  GoodputPolicy policy;
  LrScaling rule;
  ScaledProgress progress;
  double gain = 1;                 // this step's learning-rate gain
  double first_sq = std::nan("");  // one rank: |gradient|^2 after the first micro-batch
  uint64_t first_samples = 0;
  int since_change = 0;            // steps since B last changed
  int decisions = 0;
};

void BatchController::GoodputDeleter::operator()(Goodput* g) const { delete g; }

int64_t initial_global_batch(const TrainConfig& c, int dp) {
  if (c.batch().global_batch() > 0) return c.batch().global_batch();
  return std::clamp<int64_t>(c.batch().min_global_batch(), dp, std::max(c.batch().max_global_batch(), dp));
}

void BatchController::setup_goodput() {
  if (config_.batch().global_batch() != 0) return;
  if (layout_.pipeline) {
    throw ConfigError("batch.global_batch = auto does not combine with parallel.pp > 1 yet; "
                      "give the global batch a number with a pipeline.");
  }
  GoodputSettings s;
  s.min_batch = static_cast<uint64_t>(config_.batch().min_global_batch());
  s.max_batch = static_cast<uint64_t>(config_.batch().max_global_batch());
  s.world_size = peers_.dp_size();
  goodput_.reset(new Goodput(s, parse_lr_scaling(config_.batch().lr_scaling())));
  if (peers_.leader()) {
    log_.info("global batch: auto, from ", plan_->global_batch(), " in [", s.min_batch, ", ", s.max_batch,
              "], learning rate scaled by ", config_.batch().lr_scaling(), " from optimizer.lr at ",
              s.min_batch, " sequences");
  }
}

void BatchController::setup_shares() {
  if (config_.batch().shares() != "throughput" || peers_.dp_size() < 2) return;
  if (layout_.pipeline || config_.parallel().zero_stage() == 3) {
    throw ConfigError("batch.shares = throughput does not combine with parallel.pp > 1 or "
                      "parallel.zero_stage = 3 yet; use batch.shares = equal there.");
  }
  balancer_ = std::make_unique<ShareBalancer>(peers_.dp_size());
}

void BatchController::setup_trial() {
  if (layout_.pipeline || config_.batch().micro_batch() != 0 || config_.runtime().recompute() != "auto" ||
      recompute_) {
    return;
  }
  const int64_t with = model_.largest_fitting(budget(), config_.batch().memory_margin(), micro_batch_cap(), true);
  // Every rank must gain a larger micro-batch, or none tries.
  if (peers_.min_over_world(with > micro_batch_ ? 1 : 0, "the recomputation trial's verdict (batch_goodput)") == 0) {
    return;
  }
  trial_ = Trial{1, 0, micro_batch_, with, 0, 0};
  if (peers_.leader()) {
    log_.info("activation recomputation would let micro-batch ", with, " fit instead of ", micro_batch_,
              "; timing both over the next steps");
  }
}

bool BatchController::finished(uint64_t step) const {
  const double total = static_cast<double>(config_.schedule().max_steps());
  return goodput_ ? goodput_->progress.progress >= total : static_cast<double>(step) >= total;
}

double BatchController::schedule_progress(uint64_t step) const {
  return goodput_ ? goodput_->progress.progress : static_cast<double>(step);
}

double BatchController::progress_fraction(uint64_t step) const {
  const double total = static_cast<double>(config_.schedule().max_steps());
  if (total <= 0) return 1;
  return std::clamp(schedule_progress(step) / total, 0.0, 1.0);
}

double BatchController::noise_scale() const {
  return goodput_ ? goodput_->noise.noise_scale().value_or(std::nan("")) : std::nan("");
}

double BatchController::learning_rate(uint64_t step) {
  const auto& s = config_.schedule();
  const double lr = config_.optimizer().lr();
  if (!goodput_) {
    return etr::learning_rate(static_cast<int64_t>(step), lr, s.warmup_steps(), s.max_steps(), s.min_lr_ratio());
  }
  // The schedule at the scale-invariant progress, times the gain of the current B (from the
  // noise scale measured so far); the progress then advances.
  const double base = learning_rate_at(goodput_->progress.progress, lr, s.warmup_steps(), s.max_steps(),
                                       s.min_lr_ratio());
  const double b0 = static_cast<double>(config_.batch().min_global_batch());
  const double noise = goodput_->noise.noise_scale().value_or(0.0);
  goodput_->gain = goodput_->progress.advance(goodput_->rule, static_cast<double>(plan_->global_batch()), b0, noise);
  return base * goodput_->gain;
}

bool BatchController::wants_first_micro_batch() const { return goodput_ && peers_.dp_size() == 1; }

void BatchController::first_micro_batch(double grad_sq_norm, uint64_t samples) {
  if (!wants_first_micro_batch()) return;
  goodput_->first_sq = grad_sq_norm;
  goodput_->first_samples = samples;
}

double BatchController::local_noise_term(double local_grad_sq_norm) const {
  if (!goodput_ || peers_.dp_size() == 1) return 0;
  const uint64_t B = plan_->global_batch(), n = rank_batch().samples();
  return static_cast<double>(n) * mean_gradient_sq_norm(local_grad_sq_norm, n, B);
}

// After the step, with the sums every rank shares: the noise sample, the step time, and
// every few steps the decision.
void BatchController::goodput_after_step(const StepOutcome& o) {
  Goodput& g = *goodput_;
  const uint64_t B = plan_->global_batch();
  const double global_sq = o.grad_norm * o.grad_norm;
  const double n = static_cast<double>(std::max(1, o.ranks));
  if (peers_.dp_size() > 1) {
    g.noise.update(data_parallel_sample(o.summed_noise_term, peers_.dp_size(), B, global_sq));
  } else if (std::isfinite(g.first_sq)) {
    g.noise.update(micro_batch_sample(mean_gradient_sq_norm(g.first_sq, g.first_samples, B), g.first_samples,
                                      global_sq, B));
  }
  g.first_sq = std::nan("");
  if (++g.since_change > 1) {  // not the first at a new B
    g.times.observe(B, o.summed_compute_seconds / n, o.summed_optimizer_seconds / n);
  }
  constexpr int kEvery = 5;  // steps between decisions
  const auto noise = g.noise.noise_scale();
  const auto fit = g.times.fit();
  if (g.since_change < kEvery || !noise || !fit || g.noise.updates() < kEvery) return;
  const GoodputDecision d = g.policy.decide(B, *noise, *fit);
  ++g.decisions;
  decide(o.step, "batch/decisions", to_text("step ", o.step, ": ", d.describe()));
  if (!d.changed()) {
    g.since_change = 0;
    return;
  }
  set_global_batch(d.batch, o.step, o.samples_seen);
}

void BatchController::set_global_batch(uint64_t B, uint64_t step, uint64_t samples_seen) {
  plan_.emplace(plan_data_parallel_batch(static_cast<int64_t>(B), peers_.dp_size(), 1, layout_.train_samples));
  replan(Replan::kGlobalBatch, fit_micro_batch(micro_batch_cap()));
  origin_ = {step, samples_seen};  // samples_seen from here: B per step
  goodput_->since_change = 0;
}

// Collective over the data-parallel group, after a step: every rank's samples and
// compute time, the balancer's proposal, and a new plan when it makes one.
void BatchController::balance_shares(uint64_t step, double compute_seconds) {
  if (!balancer_) return;
  const double mine[2] = {compute_seconds, static_cast<double>(rank_batch().samples())};
  const std::vector<double> all = peers_.gather_dp(mine, "the ranks' throughput for the shares (batch_goodput)");
  std::vector<uint64_t> samples(static_cast<size_t>(peers_.dp_size()));
  std::vector<double> seconds(samples.size());
  for (size_t r = 0; r < samples.size(); ++r) {
    seconds[r] = all[2 * r];
    samples[r] = static_cast<uint64_t>(all[2 * r + 1]);
  }
  balancer_->observe(samples, seconds);
  const std::optional<std::vector<uint64_t>> next = balancer_->propose(samples);
  if (!next) return;
  std::vector<RankBatch> ranks;
  for (uint64_t n : *next) ranks.push_back({1, n, 0});
  plan_.emplace(plan_->global_batch(), std::move(ranks));
  replan(Replan::kShares, fit_micro_batch(micro_batch_cap()));
  ++rebalances_;
  std::string text;
  for (size_t r = 0; r < next->size(); ++r) {
    text += (r ? ", " : "") + std::to_string((*next)[r]) + " (" +
            std::to_string(static_cast<int>(balancer_->rates()[r] + 0.5)) + "/s)";
  }
  decide(step, "batch/decisions",
         to_text("step ", step, ": shares of the global batch re-balanced to the ranks' speeds: ", text));
}

// After a step: `compute` is the ranks' summed forward and backward seconds, `samples` the
// step's global batch.
void BatchController::trial_step(uint64_t step, double compute, double samples) {
  Trial& t = trial_;
  if (!trial_active()) return;
  if (++t.steps == 1) return;  // a warm-up step at each choice
  (t.phase == 1 ? t.seconds_without : t.seconds_with) += compute / samples;
  if (t.steps < 3) return;
  t.steps = 0;
  if (t.phase == 1) {
    t.phase = 2;
    recompute_ = true;
    replan(Replan::kRecompute, t.with);
    return;
  }
  t.phase = 3;
  const bool keep = t.seconds_with < 0.97 * t.seconds_without;
  if (!keep) {
    recompute_ = false;
    replan(Replan::kRecompute, fit_micro_batch(micro_batch_cap()));
  }
  decide(step, "memory/decisions",
         to_text("activation recomputation ", keep ? "on" : "off", ": micro-batch ", t.with, " with it took ",
                 1e3 * t.seconds_with / 2, " ms per sample, ", t.without, " without it ",
                 1e3 * t.seconds_without / 2, " ms (summed over the ranks)"));
}

ckpt::BatchPolicy BatchController::policy_state() const {
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

// A resumed job: where the current global batch started (the data position counts from
// there), and with an automatic global batch the checkpoint's B, progress and noise
// averages (the step times are measured again: the world may differ).
void BatchController::restore_policy(const ckpt::Manifest& m) {
  const ckpt::BatchPolicy& saved = m.batch();
  if (goodput_ && saved.auto_global_batch()) {
    origin_ = {m.data().batch_origin_step(), m.data().batch_origin_samples()};
  } else if (saved.global_batch() != static_cast<int64_t>(plan_->global_batch())) {
    if (peers_.leader()) {
      log_.warn("the global batch changed from ", saved.global_batch(), " to ", plan_->global_batch(),
                "; training continues at sample ", m.data().samples_seen(),
                " but not as the uninterrupted run would");
    }
    origin_ = {m.step(), m.data().samples_seen()};
  } else {
    origin_ = {m.data().batch_origin_step(), m.data().batch_origin_samples()};
  }
  if (!goodput_ || !saved.auto_global_batch()) return;
  const BatchOrigin origin = origin_;  // (a new B resets the origin: the checkpoint's holds)
  const uint64_t B = goodput_->policy.legal_batch(static_cast<uint64_t>(saved.global_batch()));
  if (B != plan_->global_batch()) set_global_batch(B, m.step(), m.data().samples_seen());
  origin_ = origin;
  goodput_->progress.progress = saved.schedule_progress();
  NoiseScaleState n = goodput_->noise.state();
  n.grad_sq_ema = saved.noise_grad_sq_ema();
  n.trace_ema = saved.noise_trace_ema();
  n.updates = saved.noise_updates();
  goodput_->noise.restore(n);
}

}  // namespace etr
