#include "examples/train/trainer.h"

#include <sched.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <nlohmann/json.hpp>

#include "examples/data/byte_tokenizer.h"
#include "examples/data/synthetic_corpus.h"
#include "examples/gpt/hf_weights.h"
#include "runtime/bytes.h"
#include "runtime/cpu_affinity.h"
#include "runtime/error.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/mpi_check.h"

namespace etr::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

size_t host_budget(const TrainConfig& c) {
  return c.runtime().host_memory_budget().empty() ? 0 : parse_bytes(c.runtime().host_memory_budget());
}

// runtime.threads = 0: this rank's share of the cores it may run on. A rank bound to
// fewer cores than the machine has (mpirun --bind-to core) owns them; otherwise the
// node's cores are shared by its ranks. Collective over `group`.
int default_threads(const Group& group) {
  const int local_size = ranks_on_this_node(group);
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  int allowed = cores;
  if (sched_getaffinity(0, sizeof set, &set) == 0) allowed = std::max(1, CPU_COUNT(&set));
  if (allowed < cores) return allowed;
  return std::max(1, cores / local_size);
}

// The environment variable `name` = S[:R]: S for rank R (every rank without :R), -1 for
// the others and when it is unset.
int64_t step_for_rank_from_env(const char* name, int rank) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  const std::string_view s(v);
  const size_t colon = s.find(':');
  int64_t step = -1;
  int at_rank = rank;
  auto number = [](std::string_view text, auto& out) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size() && out >= 0;
  };
  if (!number(s.substr(0, colon), step) ||
      (colon != std::string_view::npos && !number(s.substr(colon + 1), at_rank))) {
    throw ConfigError(std::string(name) + "='" + std::string(s) +
                      "' is not STEP or STEP:RANK (non-negative integers)");
  }
  return at_rank == rank ? step : -1;
}

// ETR_FAIL_AT_STEP=S[:R]: rank R (every rank without :R) throws at the start of step S.
// For tests of failure handling (a rank that raises must not leave the others hanging).
int64_t fail_at_step_from_env(int rank) {
  return step_for_rank_from_env("ETR_FAIL_AT_STEP", rank);
}

// "nan", "inf" or "-inf".
std::string nonfinite_text(double x) {
  return std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
}

}  // namespace

Trainer::Trainer(const TrainConfig& config, const Group& group, Logger& log,
                 ElasticReporter* elastic)
    : config_(config),
      log_(log),
      grid_(std::make_unique<ProcessGrid>(group, 1)),
      alloc_(host_budget(config)),
      model_config_(gpt::GptConfig::from(config.model())),
      elastic_(elastic) {
  const int dp = grid_->dp_size();
  // Every rank needs at least one sequence (checked alike on every rank).
  if (config_.batch().global_batch() < dp) {
    throw ConfigError("batch.global_batch = " + std::to_string(config_.batch().global_batch()) +
                      " is smaller than the " + std::to_string(dp) +
                      " data-parallel ranks; every rank needs at least one sequence per step, "
                      "so raise it or start fewer ranks.");
  }
  plan_.emplace(BatchPlan::balanced(static_cast<uint64_t>(config_.batch().global_batch()),
                                          dp, static_cast<uint64_t>(config_.batch().micro_batch())));
  const int threads = config_.runtime().threads() > 0 ? config_.runtime().threads()
                                                      : default_threads(group);
  cpu::set_num_threads(threads);
  // Checked before allocating: a model or micro-batch too large for the budget is one
  // sentence, not minutes of allocation (or an int64 overflow) before OutOfMemory.
  model_config_.require_fits(config_.batch().micro_batch(), threads,
                             static_cast<double>(alloc_.stats().budget));
  model_ = std::make_unique<gpt::GptModel<float>>(model_config_, alloc_);
  if (!config_.model().init_from().empty()) {
    gpt::import_hf(*model_, config_.model().init_from());
    if (leader()) log_.info("initialised from ", config_.model().init_from());
  } else {
    model_->init(config_.model().init_seed(), config_.model().init_std());
  }
  optimizer_ = std::make_unique<AdamW>(model_->layout());
  adamw_ = AdamWOptions{config_.optimizer().lr(), config_.optimizer().beta1(),
                        config_.optimizer().beta2(), config_.optimizer().eps(),
                        config_.optimizer().weight_decay()};
  const size_t state = static_cast<size_t>(model_->layout().numel()) * sizeof(float);
  m_ = Buffer(alloc_, state);
  v_ = Buffer(alloc_, state);
  std::memset(m_.data(), 0, state);
  std::memset(v_.data(), 0, state);
  const int64_t b = static_cast<int64_t>(rank_batch().micro_batch), T = model_config_.seq_len;
  if (leader()) {
    log_.info("model: ", model_config_.str(), "; activations for micro-batch ", b, " x ", T, ": ",
              format_bytes(static_cast<double>(model_->activation_bytes(b, T))));
  }
  model_->plan(std::max<int64_t>(b, config_.batch().micro_batch()), T);
  inputs_.resize(static_cast<size_t>(std::max<int64_t>(b, config_.batch().micro_batch()) * T));
  targets_.resize(inputs_.size());
  load_data();
  setup_parallel();
  setup_checkpoints();
  if (elastic_ && leader()) elastic_->event("ready step=" + std::to_string(position_.step));
  if (leader() && !config_.log().metrics_file().empty()) {
    // A resumed run continues the metrics of the run it resumes.
    metrics_.open(config_.log().metrics_file(),
                  std::ios::out | (resumed_from_ ? std::ios::app : std::ios::trunc));
    if (!metrics_) throw IoError("cannot write the metrics file " + config_.log().metrics_file());
  }
  fail_at_step_ = fail_at_step_from_env(grid_->rank());
}

Trainer::~Trainer() = default;

void Trainer::setup_parallel() {
  const int dp = grid_->dp_size();
  const auto& p = config_.parallel();
  if (dp > 1) {
    CommOptions grad_options = CommOptions::from_env();
    grad_options.inline_bytes = 0;  // buckets never block backward
    // The progress thread shares the cores with backward: when a bucket waits for a peer
    // it spins briefly, then sleeps (never yields: a yield takes the core straight back
    // from the compute thread). Measured with etr-bench dp, docs/architecture.md.
    if (grad_options.spin_polls < 0) grad_options.spin_polls = 64;
    if (grad_options.yield_polls < 0) grad_options.yield_polls = 0;
    if (grad_options.max_idle_sleep.count() < 0) {
      grad_options.max_idle_sleep = std::chrono::microseconds(200);
    }
    grad_comm_ = std::make_unique<HostCommunicator>(grid_->dp_group(), grad_options);
    control_comm_ = std::make_unique<HostCommunicator>(grid_->dp_group(), CommOptions::from_env());
    broadcast_parameters(*grad_comm_, model_->params(), model_->layout().numel());
    BucketOptions bo;
    bo.first_bucket_bytes = parse_bytes(p.first_bucket_size());
    bo.bucket_cap_bytes = parse_bytes(p.bucket_size());
    bo.overlap = p.overlap();
    reducer_ = std::make_unique<BucketReducer>(model_->layout(), model_->grads(), *grad_comm_, bo,
                                               &tracer_);
    if (leader()) {
      const RankBatch& r0 = plan_->rank(0);
      log_.info("data parallel: ", dp, " ranks; rank 0 runs ", r0.accumulation,
                " micro-batch(es) of ", r0.micro_batch, " of the global batch ",
                plan_->global_batch(), "; ", reducer_->buckets().size(),
                " gradient buckets (first ", p.first_bucket_size(), ", then ", p.bucket_size(),
                "), overlap ", p.overlap() ? "on" : "off");
    }
  }
  if (!config_.log().trace_file().empty()) {
    MPI_CHECK(MPI_Barrier(grid_->dp_group().comm()));  // line the ranks' clocks up
    tracer_.enable(Clock::now());
    model_->set_tracer(&tracer_);
  }
}

void Trainer::load_data() {
  const auto& d = config_.data();
  if (d.synthetic()) {
    const size_t bytes = parse_bytes(d.synthetic_size());
    // Outside the allocator (a std::string and its tokens), but under the same budget.
    const MemoryStats m = alloc_.stats();
    const double left = static_cast<double>(m.budget - std::min(m.budget, m.in_use));
    if (data::synthetic_corpus_bytes(bytes) > left) {
      throw ConfigError("data.synthetic_size = " + d.synthetic_size() + " needs " +
                        format_bytes(data::synthetic_corpus_bytes(bytes)) +
                        " for the synthetic corpus and its tokens, more than the " +
                        format_bytes(left) +
                        " left of the host memory budget after the model; make it smaller or "
                        "raise runtime.host_memory_budget.");
    }
    synthetic_ = data::ByteTokenizer::encode(data::SyntheticCorpus(d.seed()).generate(bytes));
    tokens_ = synthetic_;
    if (leader()) log_.info("data: synthetic corpus, ", synthetic_.size(), " tokens (seed ", d.seed(), ")");
  } else {
    file_.emplace(d.train_file());
    tokens_ = file_->tokens();
    if (leader()) log_.info("data: ", d.train_file(), ", ", tokens_.size(), " tokens");
  }
  if (file_ && file_->vocab_size() > static_cast<uint32_t>(model_config_.vocab_size)) {
    throw ConfigError("the token file's vocabulary (" + std::to_string(file_->vocab_size()) +
                      ") is larger than model.vocab_size (" +
                      std::to_string(model_config_.vocab_size) + ")");
  }
  split_ = data::split_windows(tokens_.size(), model_config_.seq_len, d.val_fraction());
  if (split_->train.count() == 0) {
    throw ConfigError("the training data (" + std::to_string(tokens_.size()) +
                      " tokens) holds no window of seq_len + 1 = " +
                      std::to_string(model_config_.seq_len + 1) + " tokens");
  }
  // A step samples global_batch distinct windows: more than the corpus holds would repeat
  // windows within one step (and 2e9 of them would take years).
  if (static_cast<uint64_t>(config_.batch().global_batch()) > split_->train.count()) {
    throw ConfigError("batch.global_batch = " + std::to_string(config_.batch().global_batch()) +
                      " is more than the " + std::to_string(split_->train.count()) +
                      " training windows of model.seq_len + 1 tokens the corpus holds; lower "
                      "it or give more data.");
  }
  sampler_.emplace(split_->train, d.seed());
  position_.seed = d.seed();
}

void Trainer::sum_over_ranks(double* values, int count) {
  if (!control_comm_) return;
  control_comm_->allreduce(TensorView::flat(values, count, DType::kF64), ReduceOp::kSum)->wait();
}

StepStats Trainer::train_step() {
  const auto t0 = Clock::now();
  if (fail_at_step_ >= 0 && static_cast<int64_t>(position_.step) == fail_at_step_) {
    throw Error("rank " + std::to_string(grid_->rank()) + " fails at step " +
                std::to_string(fail_at_step_) +
                " because ETR_FAIL_AT_STEP asks it to (a test of failure handling)");
  }
  const auto& lg = config_.log();
  tracer_.set_recording(tracer_.enabled() &&
                        (lg.trace_steps() == 0 || static_cast<int64_t>(position_.step) < lg.trace_steps()));
  const int64_t B = config_.batch().global_batch(), T = model_config_.seq_len;
  const int r = grid_->dp_rank();
  const RankBatch& mine = plan_->rank(r);
  const auto& s = config_.schedule();
  StepStats st;
  st.lr = learning_rate(static_cast<int64_t>(position_.step), config_.optimizer().lr(),
                        s.warmup_steps(), s.max_steps(), s.min_lr_ratio());
  model_->zero_grads();
  if (nonfinite_at_step_ == static_cast<int64_t>(position_.step) + 1) {
    // ETR_NONFINITE_AT_STEP: a NaN in this rank's gradient of the last tensor (backward
    // accumulates into it, and the reducer sums it into every rank's).
    const TensorEntry& e = model_->layout().entries().back();
    model_->grads()[e.offset] = std::nanf("");
  }
  double loss_sum = 0;  // sum over this rank's tokens of the per-token loss / (B T)
  for (uint64_t m = 0; m < mine.accumulation; ++m) {
    const SampleRange mb = plan_->micro_batch(position_.samples_seen, r, m);
    const int64_t b = static_cast<int64_t>(mb.count);
    {
      auto scope = tracer_.scope(TraceTrack::kData, "load batch", "data");
      sampler_->gather(tokens_, mb.first, mb.count, std::span(inputs_).first(b * T),
                       std::span(targets_).first(b * T));
    }
    Batch batch{inputs_.data(), targets_.data(), b, T, 1.0 / static_cast<double>(B * T)};
    loss_sum += model_->forward(batch) * static_cast<double>(b) / static_cast<double>(B);
    const bool last = m + 1 == mine.accumulation;
    if (last && reducer_) {
      reducer_->begin_step();
      model_->backward(batch, [this](int layer) { reducer_->layer_ready(layer); });
    } else {
      model_->backward(batch);
    }
  }
  if (reducer_) st.comm = reducer_->finish();
  const int64_t n = model_->layout().numel();
  st.grad_norm = grad_norm(model_->grads(), n);  // of the gradients summed over the ranks
  // The resize flag and "my gradient norm is not finite" ride on the loss's sum: the ranks
  // agree on them at no extra cost. The summed loss is finite on every rank or on none
  // (a NaN or an infinity in any term makes every rank's sum one), so together with the
  // summed flag every rank takes the same finite-or-stop decision.
  double sums[3] = {loss_sum, resize_requested() ? 1.0 : 0.0,
                    std::isfinite(st.grad_norm) ? 0.0 : 1.0};
  sum_over_ranks(sums, 3);
  st.loss = sums[0];
  st.resize = sums[1] > 0;
  if (!std::isfinite(st.loss) || sums[2] > 0) {
    skip_or_stop(st, std::isfinite(st.loss));  // throws unless the step may be skipped
  } else {
    // An async checkpoint of the previous step may still be copying the state.
    if (ckpt_writer_) ckpt_writer_->wait_for_snapshot();
    auto scope = tracer_.scope(TraceTrack::kCompute, "optimizer", "optimizer");
    clip_grad_norm(model_->grads(), n, st.grad_norm, config_.optimizer().grad_clip());
    optimizer_->step(model_->params(), model_->grads(), static_cast<float*>(m_.data()),
                     static_cast<float*>(v_.data()), 0, n,
                     static_cast<int64_t>(position_.step) + 1, st.lr, adamw_);
  }
  position_.advance(static_cast<uint64_t>(B));
  st.seconds = seconds_since(t0);
  return st;
}

int64_t Trainer::nonfinite_step_from_env(int rank) {
  return step_for_rank_from_env("ETR_NONFINITE_AT_STEP", rank);
}

void Trainer::skip_or_stop(StepStats& st, bool loss_finite) {
  const int64_t step = static_cast<int64_t>(position_.step) + 1;  // as the progress line counts
  const int dp = grid_->dp_size();
  const std::string over = dp > 1 ? " summed over the " + std::to_string(dp) + " ranks" : "";
  const std::string what = !loss_finite
                               ? "the loss" + over + " is " + nonfinite_text(st.loss)
                               : "the norm of the gradients" + over + " is " +
                                     (std::isfinite(st.grad_norm) ? "not finite on another rank"
                                                                  : nonfinite_text(st.grad_norm));
  const int64_t limit = config_.optimizer().skip_nonfinite_steps();
  if (skipped_steps_ < limit) {
    ++skipped_steps_;
    st.skipped = true;
    if (leader()) {
      log_.warn("step ", step, ": ", what, "; skipped it (", skipped_steps_, " of at most ", limit,
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

RunSummary Trainer::run() {
  RunSummary sum;
  const auto t0 = Clock::now();
  const int64_t steps = config_.schedule().max_steps();
  const int64_t start = static_cast<int64_t>(position_.step);
  sum.start_step = start;
  const auto& lg = config_.log();
  if (start >= steps && leader()) {
    log_.info("already at step ", start, " of schedule.max_steps = ", steps, "; nothing to train");
  }
  for (int64_t i = start; i < steps; ++i) {
    StepStats s = train_step();
    if (i == start) sum.first_loss = s.loss;
    if (s.skipped) ++sum.skipped_steps;
    if (i > start || steps - start == 1) {
      sum.comm += s.comm;
      ++sum.comm_steps;
    }
    sum.final_loss = s.loss;
    const int64_t step = static_cast<int64_t>(position_.step);
    if (leader() && lg.log_every() > 0 &&
        (step % lg.log_every() == 0 || step == steps || step == 1)) {
      log_step(s);
    }
    if ((lg.eval_every() > 0 && step % lg.eval_every() == 0) || step == steps) {
      sum.final_val_loss = evaluate();
      if (leader()) {
        log_.info("step ", step, " | held-out loss ", sum.final_val_loss);
        write_metrics(nlohmann::json{{"step", step}, {"val_loss", sum.final_val_loss}}.dump());
      }
    }
    checkpoint_if_due(step, step == steps);
    if (elastic_ && elastic_->active() && leader()) {
      elastic_->progress(step);
      if (i == start) {
        elastic_->event("first-step step=" + std::to_string(step));
        log_relaunch(step);
      }
    }
    if (s.resize && step < steps) {
      clear_resize_request();
      if (!elastic_ || !elastic_->active()) {
        if (leader()) log_.warn("ignoring a resize request (SIGUSR1): only jobs launched by etr-run resize");
        continue;
      }
      save_for_resize(step);
      sum.resized = true;
      sum.steps = step - start;
      break;
    }
  }
  flush_checkpoints();
  if (!sum.resized) sum.steps = std::max<int64_t>(0, steps - start);
  sum.seconds = seconds_since(t0);
  sum.tokens_per_second = static_cast<double>(sum.steps * config_.batch().global_batch() *
                                              model_config_.seq_len) / sum.seconds;
  sum.peak_bytes = alloc_.stats().peak;
  write_trace();
  if (sum.resized) return sum;  // not done: the relaunched job samples and exports
  if (leader() && lg.sample_tokens() > 0) sum.sample = generate(lg.sample_prompt(), lg.sample_tokens());
  if (leader() && !config_.output().export_safetensors().empty()) {
    gpt::export_hf(*model_, config_.output().export_safetensors());
    log_.info("exported weights to ", config_.output().export_safetensors());
  }
  return sum;
}

}  // namespace etr::train
