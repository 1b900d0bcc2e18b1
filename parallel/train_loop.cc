// TrainSession: the loop over steps and what it does between them (train_session.h):
// progress, held-out loss, checkpoints, the elastic check, and the end of a run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>

#include "parallel/train_session.h"

namespace etr {

void TrainSession::after_step(const StepStats& s, int64_t start, RunSummary& sum) {
  const int64_t step = static_cast<int64_t>(position_.step);
  const bool last = finished();
  const auto& lg = config_.log();
  if (lg.log_every() > 0 && (step % lg.log_every() == 0 || last || step == 1)) {
    StepContext c;
    c.step = position_.step;
    c.max_steps = config_.schedule().max_steps();
    c.progress = batch_->progress_fraction(position_.step);
    c.scaled = batch_->automatic_global_batch();
    c.tokens = static_cast<double>(s.global_batch > 0 ? static_cast<uint64_t>(s.global_batch)
                                                      : batch_plan().global_batch()) *
               static_cast<double>(data_->seq_len());
    c.flops_per_token = model_.flops_per_token;
    c.global_batch = static_cast<int64_t>(batch_plan().global_batch());
    c.oom_recoveries = oom_recoveries();
    c.replans = memory_replans();
    c.budget = work_alloc().stats().budget;
    for (const RankBatch& r : batch_plan().ranks()) c.shares.push_back(r.samples());
    c.communicates = engine_->reducer() != nullptr;
    c.skipped_steps = step_.skipped;
    c.memory = engine_->memory();
    c.stage_activation_bytes = stage_activation_bytes_;
    c.world = grid_->size();
    reporter_->step(s, c);
  }
  if ((lg.eval_every() > 0 && step % lg.eval_every() == 0) || last) {
    elastic_->at(RankStage::kEvaluate, position_.step);
    sum.final_val_loss = evaluate();
    reporter_->held_out(position_.step, sum.final_val_loss);
  }
  checkpoints_->set_batch_policy(batch_->policy_state());
  elastic_->at(last ? RankStage::kFinish : RankStage::kCheckpoint, position_.step);
  checkpoints_->at_step(step, last, position_, batch_->origin(), model_.stack->layout(),
                        [this] { return engine_->states(); });
  if (checkpoints_->writer()) reporter_->checkpoints(checkpoints_->writer()->stats());
  elastic_->after_step(step, step - 1 == start);
}

void TrainSession::report_decision(uint64_t step, const std::string& tag, const std::string& text) {
  if (reporter_) reporter_->decision(step, tag, text);
}

bool TrainSession::finished() const {
  const int64_t stop = config_.schedule().stop_at_step();
  return batch_->finished(position_.step) || (stop > 0 && static_cast<int64_t>(position_.step) >= stop);
}

RunSummary TrainSession::run() {
  RunSummary sum;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t steps = config_.schedule().max_steps();
  const int64_t start = static_cast<int64_t>(position_.step);
  const uint64_t start_samples = position_.samples_seen;
  sum.start_step = start;
  if (finished() && leader()) {
    log_.info("already at step ", start, " of schedule.max_steps = ", steps, "; nothing to train");
  }
  for (int64_t i = start; !finished(); ++i) {
    StepStats s = train_step();
    if (i == start) sum.first_loss = s.loss;
    if (s.skipped) ++sum.skipped_steps;
    if (i > start || steps - start == 1) {
      sum.comm += s.comm;
      ++sum.comm_steps;
    }
    sum.final_loss = s.loss;
    after_step(s, start, sum);
    const int64_t step = static_cast<int64_t>(position_.step);
    if (s.stop && !finished()) {
      const auto save = [this](const std::string& tier) { return save_checkpoint(tier); };
      sum.stop_save_failed = !elastic_->stop(step, *checkpoints_, save);
      sum.stopped = true;
      // The same status on every rank: under etr-run each got SIGUSR2 (or will); else
      // SIGTERM's for a rank that got none.
      const int own = stop_signal() != 0 ? stop_signal() : SIGTERM;
      sum.stop_signal = elastic_->active() ? SIGUSR2 : own;
      sum.steps = step - start;
      break;
    }
    if (s.resize && !finished() &&
        elastic_->resize(step, *checkpoints_, [this](const std::string& tier) {
          return save_checkpoint(tier);
        })) {
      sum.resized = true;
      sum.steps = step - start;
      break;
    }
  }
  elastic_->at(RankStage::kFinish, position_.step);
  flush_checkpoints();
  if (checkpoints_->writer()) reporter_->checkpoints(checkpoints_->writer()->stats());
  // Done (the schedule's end or schedule.stop_at_step), or stopped: once the step is on
  // disk the memory tier's copies (host RAM) are not needed (--resume latest reads it).
  if (!sum.resized && (sum.stopped || finished())) {
    checkpoints_->release_memory_tier(static_cast<int64_t>(position_.step));
  }
  if (!sum.resized && !sum.stopped) sum.steps = static_cast<int64_t>(position_.step) - start;
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  sum.tokens_per_second = static_cast<double>(position_.samples_seen - start_samples) *
                         static_cast<double>(data_->seq_len()) / sum.seconds;
  sum.peak_bytes = std::max(batch_->peak_before_replans(), work_alloc().stats().peak);
  sum.device_peak_bytes = dev_.peak;
  sum.oom_recoveries = oom_recoveries();
  sum.memory_replans = memory_replans();
  write_trace();
  if (sum.resized || sum.stopped) return sum;  // not done: the job resumed samples and exports
  if ((config_.log().sample_tokens() > 0 && program_.sample) ||
      (!config_.output().export_safetensors().empty() && program_.export_weights)) {
    engine_->materialize_parameters();  // collective: stage 3 gathers them
    // A pipeline gathers the whole model on world rank 0, bound to its whole stack.
    // (the activations of training went back to the allocator at the end of each step)
    if (leader()) {
      move_stack_to_host();  // a GPU run samples on the host
      model_.stack->plan(alloc_, 1, data_->seq_len());
    }
  }
  if (leader() && config_.log().sample_tokens() > 0 && program_.sample) {
    sum.sample = program_.sample(*this);
  }
  if (leader() && !config_.output().export_safetensors().empty() && program_.export_weights) {
    program_.export_weights(*this);
  }
  return sum;
}

double TrainSession::evaluate() {
  auto scope = tracer_.scope(TraceTrack::kCompute, "evaluate", "eval");
  const uint64_t b = static_cast<uint64_t>(micro_batch());
  acquire_activations();  // given back at the end of each step
  const int64_t T = data_->seq_len();
  const uint64_t max = static_cast<uint64_t>(config_.log().eval_batches()) * b;
  const EvalShare share = eval_share(data_->eval_samples(), b, max, grid_->dp_rank(),
                                     grid_->dp_size());
  if (pipeline_) {
    for (int c = 0; c < pipeline_->chunks(); ++c) pipeline_->chunk_engine(c).materialize_parameters();
  } else {
    engine_->materialize_parameters();  // collective: forward without the engine's hooks
  }
  // A pipeline's loss is on its last stage: it alone counts the samples.
  const bool counts = !pipeline_ || pipeline_->holds_loss();
  double sums[2] = {0, 0};  // loss summed over samples, samples
  for (uint64_t k = 0; k < share.batches; ++k) {
    const uint64_t lo = std::min(share.count, k * b), hi = std::min(share.count, lo + b);
    const int64_t m = static_cast<int64_t>(hi - lo);
    if (m == 0) continue;  // this rank's share ran out; the others go on
    data_->gather_eval(share.first + lo, hi - lo, std::span(step_.inputs).first(m * T),
                       std::span(step_.targets).first(m * T));
    const Batch batch = dev_.staging->stage(Batch{step_.inputs.data(), step_.targets.data(), m, T, 0});
    const double loss = pipeline_ ? pipeline_->executor().forward_only(batch)
                                  : with_stack([&](auto& stack) { return stack.forward(batch); });
    dev_.staging->done();
    if (!counts) continue;
    sums[0] += loss * static_cast<double>(m);
    sums[1] += static_cast<double>(m);
  }
  sum_over_ranks(sums, 2);
  release_activations();
  if (pipeline_) {
    for (int c = 0; c < pipeline_->chunks(); ++c) pipeline_->chunk_engine(c).release_parameters();
  } else {
    engine_->release_parameters();  // ZeRO-3: the whole model gathered above goes back
  }
  return sums[1] > 0 ? sums[0] / sums[1] : std::nan("");
}

void TrainSession::write_trace() { reporter_->write_trace(tracer_, grid_->world_group()); }

}  // namespace etr
