// TrainSession's optimizer step (train_session.h): the micro-batches (one stack, or a
// pipeline's schedule), the agreement every rank decides by (step_agreement.h), the
// optimizer, and what follows a step.
#include <chrono>
#include <cmath>
#include <thread>
#include <cstdio>
#include <string>
#include <utility>

#include "parallel/step_agreement.h"
#include "parallel/train_session.h"
#include "runtime/adamw.h"

namespace etr {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

void TrainSession::slow_down(double seconds) const {
  if (faults_.slow_factor > 1) {
    std::this_thread::sleep_for(std::chrono::duration<double>((faults_.slow_factor - 1) * seconds));
  }
}

void TrainSession::run_pipeline(int64_t B, int64_t T) {
  const int r = grid_->dp_rank();
  const RankBatch& mine = batch_plan().rank(r);
  const int64_t stride = static_cast<int64_t>(mine.micro_batch) * T;
  std::vector<Batch> batches;
  std::vector<double> weights;
  for (uint64_t m = 0; m < mine.accumulation; ++m) {
    const SampleRange mb = batch_plan().micro_batch(position_.samples_seen, r, m);
    const int64_t b = static_cast<int64_t>(mb.count);
    int32_t* in = step_.inputs.data() + static_cast<int64_t>(m) * stride;
    int32_t* tg = step_.targets.data() + static_cast<int64_t>(m) * stride;
    {
      auto scope = tracer_.scope(TraceTrack::kData, "load batch", "data");
      data_->gather(mb.first, mb.count, std::span(in, static_cast<size_t>(b * T)),
                    std::span(tg, static_cast<size_t>(b * T)));
    }
    batches.push_back(Batch{in, tg, b, T, 1.0 / static_cast<double>(B * T)});
    weights.push_back(static_cast<double>(b) / static_cast<double>(B));
  }
  // Every micro-batch of the step is in flight: all their tokens go to the device at once.
  const int64_t tokens = static_cast<int64_t>(mine.accumulation) * stride;
  const auto [in, tg] = dev_.staging->stage_step(step_.inputs.data(), step_.targets.data(), tokens);
  for (Batch& b : batches) {
    const int64_t at = b.tokens - step_.inputs.data();
    b.tokens = in + at;
    b.targets = tg + at;
  }
  const int placed = pipeline_->placements();
  pipeline_->run_step(batches, weights, dev_.scalars);  // the loss on the device, read with the norm
  if (pipeline_->placements() != placed && leader()) {
    const ActionCosts& c = pipeline_->measured_costs();
    char line[160];
    std::snprintf(line, sizeof line, "pipeline: the zb-v list placed again at the measured times (F %.2f ms, B %.2f ms, "
                  "W %.2f ms per chunk and micro-batch)", 1e3 * c.forward, 1e3 * c.backward_input, 1e3 * c.backward_weight);
    log_.info(line);
  }
  // Out of memory part-way: the rest of the step ran without compute (its transfers and
  // engine calls only); the step's sums carry the failure to every rank (train_step).
  if (step_.oom.empty()) step_.oom = pipeline_->begin_failure();
  if (step_.oom.empty()) step_.oom = pipeline_->executor().failure();
}

// The loss is left on the device (step_loss reads it).
double TrainSession::run_micro_batches(int64_t B, int64_t T) {
  const auto t0 = Clock::now();
  if (pipeline_) {
    run_pipeline(B, T);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const int r = grid_->dp_rank();
  double compute = 0;
  const RankBatch& mine = batch_plan().rank(r);
  // On a GPU the loop only enqueues: where the step's compute time decides something
  // (shares, recomputation, the automatic batch), it waits for the stream at the end and
  // takes the wall time of all the micro-batches instead.
  const bool wait_for_device = device().is_cuda() && batch_->times_steps();
  calls_->begin_step(static_cast<int>(mine.accumulation));
  if (faults_.oom_in_backward_at_step == static_cast<int64_t>(position_.step) + 1) {
    calls_->fail_in_backward(model_.stack->size() / 2);
    faults_.oom_in_backward_at_step = -1;
  }
  // Out of memory anywhere in the micro-batches: this rank makes the rest of the step's
  // engine calls without compute, so its peers' collectives complete, and the step's sums
  // carry the failure to every rank (train_step).
  try {
    for (uint64_t m = 0; m < mine.accumulation; ++m) {
      const SampleRange mb = batch_plan().micro_batch(position_.samples_seen, r, m);
      const int64_t b = static_cast<int64_t>(mb.count);
      {
        auto scope = tracer_.scope(TraceTrack::kData, "load batch", "data");
        data_->gather(mb.first, mb.count, std::span(step_.inputs).first(b * T),
                      std::span(step_.targets).first(b * T));
      }
      const Batch batch = dev_.staging->stage(
          Batch{step_.inputs.data(), step_.targets.data(), b, T, 1.0 / static_cast<double>(B * T)});
      const auto c0 = Clock::now();
      // The loss stays where the model runs until the step reads it (step_loss).
      run_micro_batch(batch, b, B, m + 1 == mine.accumulation);
      dev_.staging->done();
      if (m == 0 && mine.accumulation > 1 && batch_->wants_first_micro_batch()) {
        batch_->first_micro_batch(gradient_sq_norm(engine_->gradients(), model_.stack->layout().numel()), mb.count);
      }
      const double took = std::chrono::duration<double>(Clock::now() - c0).count();
      slow_down(took);
      compute += took * faults_.slow_factor;
    }
  } catch (const OutOfMemory& e) {
    step_.oom = e.what();
    calls_->complete();
  }
  if (wait_for_device) {
    dev_.context.synchronize();
    compute = std::chrono::duration<double>(Clock::now() - t0).count() * faults_.slow_factor;
  }
  return compute;
}

StepStats TrainSession::train_step() {
  const auto t0 = Clock::now();
  elastic_->at(RankStage::kCompute, position_.step);
  check_step_start();
  acquire_activations();  // may redo the plan: an out-of-memory error agreed on by every rank
  const int64_t B = static_cast<int64_t>(batch_plan().global_batch()), T = data_->seq_len();
  StepStats st;
  st.lr = step_learning_rate();
  engine_->begin_step();
  inject_nonfinite_gradient();
  zero_step_loss();
  const double compute_seconds = run_micro_batches(B, T);
  fetch_step_loss();  // enqueued: it arrives with the norm
  st.comm = engine_->end_backward();
  st.grad_norm = engine_->grad_norm();  // on a GPU the step's one wait for the device
  StepAgreement agreed = local_agreement(st.grad_norm, compute_seconds);
  elastic_->at(RankStage::kStepSums, position_.step);
  agreed.agree([this](double* v, int n) { sum_over_ranks(v, n); }, grid_->size());
  if (agreed.out_of_memory) {  // nothing of the step is kept: the same samples again, smaller
    batch_->recover_from_oom(position_.step + 1, std::exchange(step_.oom, std::string()));
    return train_step();
  }
  st.loss = agreed.loss;
  st.resize = agreed.resize;
  st.stop = agreed.stop;
  if (pipeline_) {
    st.bubble = agreed.bubble_mean();
    st.norm_wait_seconds = agreed.norm_wait_mean();
    st.bubble_theory = pipeline_->theoretical_bubble();
  }
  if (!std::isfinite(st.loss) || agreed.nonfinite_norm) {
    skip_or_stop(st, std::isfinite(st.loss));  // throws unless the step may be skipped
  } else {
    elastic_->at(RankStage::kOptimizer, position_.step);
    apply_optimizer(st);
  }
  position_.advance(static_cast<uint64_t>(B));
  finish_step(st, agreed, compute_seconds, B);
  st.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return st;
}

// Refusals and the injected failures (tests) before a step starts.
void TrainSession::check_step_start() {
  if (dev_.host_state && device().is_cuda()) {
    throw InvalidArgument("the model was moved from the GPU to the host for generation; this "
                          "session trains no more steps");
  }
  if (faults_.fail_at_step >= 0 && static_cast<int64_t>(position_.step) == faults_.fail_at_step) {
    throw Error("rank " + std::to_string(grid_->rank()) + " fails at step " +
                std::to_string(faults_.fail_at_step) +
                " because ETR_FAIL_AT_STEP asks it to (a test of failure handling)");
  }
  const ElasticLaunch* launch = elastic_->launch();
  if (faults_.hang_at_step == static_cast<int64_t>(position_.step) && (!launch || launch->restart == 0)) {
    log_.warn("rank ", grid_->rank(), " hangs at step ", position_.step,
              " because ETR_TEST_HANG_AT_STEP asks it to (a test of the progress watchdog)");
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (faults_.fail_allocation_step == static_cast<int64_t>(position_.step) + 1) {
    alloc_.fail_event(faults_.fail_allocation_event);
    faults_.fail_allocation_step = -1;
  }
  const auto& lg = config_.log();
  tracer_.set_recording(tracer_.enabled() &&
                        (lg.trace_steps() == 0 || static_cast<int64_t>(position_.step) < lg.trace_steps()));
}

double TrainSession::step_learning_rate() {
  return batch_->learning_rate(position_.step);
}

// A NaN in this rank's gradient of the last tensor (ETR_NONFINITE_AT_STEP: backward
// accumulates into it, and the engine sums it into every rank's).
void TrainSession::inject_nonfinite_gradient() {
  if (faults_.nonfinite_at_step != static_cast<int64_t>(position_.step) + 1) return;
  const LayerStack<float>& last = pipeline_ ? pipeline_->chunk_stack(pipeline_->chunks() - 1) : *model_.stack;
  if (!pipeline_ || pipeline_->holds_loss()) {
    poison_gradient(engine_->gradients() + last.layout().entries().back().offset);
  }
}

// This rank's part of the step's agreement (step_agreement.h).
StepAgreement TrainSession::local_agreement(double grad_norm, double compute_seconds) {
  StepAgreement a;
  a.loss = step_loss();  // the sum over this rank's tokens of the per-token loss / (B T)
  a.resize = resize_requested();
  a.stop = stop_signal() != 0;
  a.nonfinite_norm = !std::isfinite(grad_norm);
  a.replan = batch_->budget_wants_replan();  // the memory budget, re-read here
  a.out_of_memory = !step_.oom.empty();
  if (pipeline_) {
    a.bubble = pipeline_->executor().last_step().bubble();
    a.norm_wait_seconds = pipeline_->norm_wait_seconds();
  }
  if (batch_->automatic_global_batch()) {
    a.goodput_term = batch_->local_noise_term(grid_->dp_size() > 1 ? engine_->local_grad_sq_norm() : 0.0);
    a.optimizer_seconds = step_.optimizer_seconds;
  }
  if (batch_->automatic_global_batch() || batch_->trial_active()) a.compute_seconds = compute_seconds;
  return a;
}

void TrainSession::apply_optimizer(const StepStats& st) {
  checkpoints_->wait_for_snapshot();  // an async save may still be copying the state
  auto scope = tracer_.scope(TraceTrack::kCompute, "optimizer", "optimizer");
  const auto o0 = Clock::now();
  engine_->optimizer_step({static_cast<int64_t>(position_.step) + 1, st.lr, st.grad_norm,
                           config_.optimizer().grad_clip()});
  step_.optimizer_seconds = std::chrono::duration<double>(Clock::now() - o0).count();
}

// After the step: its figures, the activations back, and what the agreement asks for (a
// re-plan, the shares, the recomputation trial, the automatic global batch: the batch
// controller's after_step).
void TrainSession::finish_step(StepStats& st, const StepAgreement& agreed, double compute_seconds,
                               int64_t B) {
  st.compute_seconds = compute_seconds;
  st.micro_batch = static_cast<int64_t>(rank_batch().micro_batch);
  st.accumulation = static_cast<int64_t>(rank_batch().accumulation);
  st.predicted_peak = predicted_peak();
  st.peak_bytes = work_alloc().stats().peak;
  measure_device_peak();
  st.device_peak_bytes = dev_.peak;
  st.recompute = recompute();
  release_activations();
  measure_outside();
  if (batch_->automatic_global_batch()) st.global_batch = B;
  StepOutcome o;
  o.step = position_.step;
  o.samples_seen = position_.samples_seen;
  o.replan = agreed.replan;
  o.compute_seconds = compute_seconds;
  o.summed_compute_seconds = agreed.compute_seconds;
  o.summed_noise_term = agreed.goodput_term;
  o.summed_optimizer_seconds = agreed.optimizer_seconds;
  o.ranks = agreed.ranks;
  o.grad_norm = st.grad_norm;
  batch_->after_step(o);
  if (batch_->automatic_global_batch()) st.noise_scale = noise_scale();
}

void TrainSession::skip_or_stop(StepStats& st, bool loss_finite) {
  const int64_t step = static_cast<int64_t>(position_.step) + 1;  // as the progress line counts
  const int dp = grid_->dp_size();
  const std::string over = dp > 1 ? " summed over the " + std::to_string(dp) + " ranks" : "";
  const std::string what = !loss_finite
                               ? "the loss" + over + " is " + nonfinite_text(st.loss)
                               : "the norm of the gradients" + over + " is " +
                                     (std::isfinite(st.grad_norm) ? "not finite on another rank"
                                                                  : nonfinite_text(st.grad_norm));
  const int64_t limit = config_.optimizer().skip_nonfinite_steps();
  if (step_.skipped < limit) {
    ++step_.skipped;
    st.skipped = true;
    if (leader()) {
      log_.warn("step ", step, ": ", what, "; skipped it (", step_.skipped, " of at most ", limit,
                " in this run), the parameters and optimizer moments are unchanged");
    }
    return;
  }
  // Every rank is here alike, so a save in flight (of the last good step) can commit.
  flush_checkpoints();
  throw NonFiniteError("step " + std::to_string(step) + ": " + what +
                       ", so training stopped before the optimizer changed the parameters" +
                       (limit > 0
                            ? " (" + std::to_string(limit) + " such steps were skipped already)"
                            : std::string()) +
                       "; lower optimizer.lr or check the data, or let such steps be skipped with "
                       "optimizer.skip_nonfinite_steps.");
}

}  // namespace etr
