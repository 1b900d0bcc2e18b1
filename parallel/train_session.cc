// TrainSession: building a session and one optimizer step (train_session.h); the loop is
// in train_loop.cc, checkpoints and resuming in session_checkpoint.cc.
#include "parallel/train_session.h"

#include <sched.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "parallel/device_engine.h"
#include "parallel/pipeline_setup.h"
#include "runtime/adamw.h"
#include "runtime/bytes.h"
#include "runtime/cpu_affinity.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/mpi_check.h"
#include "runtime/state_names.h"

namespace etr {
namespace {

using Clock = std::chrono::steady_clock;

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

// The micro-batch of the first plan: batch.micro_batch, or 1 when automatic (the memory
// model picks it once the engines exist: setup_memory).
int64_t initial_micro_batch(const TrainConfig& c) { return std::max(1, c.batch().micro_batch()); }

}  // namespace

TrainSession::TrainSession(const TrainConfig& config, const Group& group, Logger& log,
                           const TrainProgram& program, ElasticReporter* elastic)
    : config_(config),
      log_(log),
      // (the pipeline's schedule checked before the grid's communicators are split)
      grid_((check_pipeline_layout(config, group.size()),
             std::make_unique<ProcessGrid>(group, config.parallel().pp()))),
      program_(program) {
  // The budget before anything is allocated: the smallest of the config's, the
  // environment's and the job's memory cgroup's share (runtime/memory_budget.h).
  budget_ = std::make_unique<MemoryBudget>(config_.runtime().memory_budget(),
                                           ranks_on_this_node(group));
  read_budget();
  setup_device(group);  // runtime.device: the stream and allocator the model is built for
  // Every rank needs at least one sequence (checked alike on every rank, before anything
  // is built); the data is checked against the batch once it is loaded.
  plan_.emplace(plan_data_parallel_batch(initial_global_batch(config_, grid_->dp_size()),
                                         grid_->dp_size(), initial_micro_batch(config_)));
  build(program, group);
  setup_parallel();
  setup_shares();
  setup_goodput();
  setup_recompute_trial();
  log_memory();
  checkpoints_ = std::make_unique<CheckpointCadence>(config_, *grid_, log_, data_->seq_len());
  if (program.attachments) checkpoints_->set_attachments(program.attachments(config_));
  elastic_ = std::make_unique<ElasticSession>(elastic, *grid_, log_);
  resume();
  elastic_->ready(position_.step, micro_batch_);
  reporter_ = std::make_unique<StepReporter>(config_, log_, leader(), resumed_from_.has_value());
  reporter_->launched(position_.step, grid_->size(), elastic_->launch(), resumed_from_);
  faults_ = FaultInjection::from_env(grid_->rank());
  read_budget_cut();     // (tests) from the first step on
  work_alloc().reset_peak();  // the measured peak is the training steps' (the memory model's)
}


TrainSession::~TrainSession() = default;

void TrainSession::build(const TrainProgram& program, const Group& group) {
  const int threads = config_.runtime().threads() > 0 ? config_.runtime().threads()
                                                      : default_threads(group);
  cpu::set_num_threads(threads);
  const SessionContext ctx{config_, log_, leader(), alloc_, threads, grid_->dp_size()};
  model_ = program.model(ctx);
  if (!model_.stack) throw InvalidArgument("the model factory built no layer stack");
  choose_precision();
  nccl_ = choose_nccl();
  place_stack(*model_.stack);
  if (mixed_) place_stack(*model_.stack_bf16);
  const int64_t T = config_.model().seq_len();
  if (leader()) log_.info("model: ", model_.description);
  if (grid_->pp_size() > 1) {
    build_pipeline(program, ctx);
  } else {
    if (mixed_) {  // DeviceEngine on either device: the bf16 copy beside the f32 state
      DataParallelOptions dp = data_parallel_options(config_);
      dp.nccl = nccl_;
      engine_ = std::make_unique<DeviceEngine>(*model_.stack_bf16, work_alloc(), device_.stream(),
                                               std::move(dp), grid_.get(), &tracer_);
    } else {
      engine_ = make_engine(*model_.stack);
    }
    engine_->initialize_parameters(model_.init);
  }
  data_ = program.data(ctx);
  if (data_->seq_len() != T) {
    throw ConfigError("the data source gives samples of " + std::to_string(data_->seq_len()) +
                      " tokens but model.seq_len is " + std::to_string(T));
  }
  plan_.emplace(plan_data_parallel_batch(initial_global_batch(config_, grid_->dp_size()),
                                         grid_->dp_size(), initial_micro_batch(config_),
                                         data_->train_samples()));
  position_.seed = data_->seed();
  if (!pipeline_) {
    calls_ = std::make_unique<EngineCallLog>(*engine_, model_.stack->size());
    hooks_ = calls_->hooks();
  }
  if (config_.runtime().cuda_graphs() && device().is_cuda() && !pipeline_) {
    graphs_ = std::make_unique<CudaGraphCache>(device(), device_.stream());
  }
  setup_memory();  // the micro-batch, and a pipeline's plan
  staging_ = std::make_unique<TokenStaging>(device(), work_alloc(), device_.stream(), micro_batch_ * T);
  // Room for every micro-batch of a step (a pipeline's are all in flight): k b <= n + b.
  const int64_t share = static_cast<int64_t>(rank_batch().samples());
  inputs_.resize(static_cast<size_t>((share + micro_batch_cap()) * T));
  targets_.resize(inputs_.size());
  // What construction freed (a pipeline's whole initial model on world rank 0, the layer
  // timing's probe) goes back to the system: the host cache is for the steps' buffers.
  alloc_.trim();
}

void TrainSession::build_pipeline(const TrainProgram& program, const SessionContext& ctx) {
  // The layers are timed (and the stages described) at the configured micro-batch, or at 1
  // when it is automatic (the memory model picks it once the engines exist).
  const int64_t T = config_.model().seq_len();
  const int64_t b = std::max(1, config_.batch().micro_batch());
  const ScheduleSpec spec = pipeline_schedule_spec(config_, grid_->pp_size(),
                                                   static_cast<int>(rank_batch().accumulation));
  check_pipeline_layers(spec, *model_.stack);  // before the measurement's broadcast
  // Measured costs: world rank 0 times a probe instance of the layers once (the whole
  // model's state and one micro-batch's activations, freed after), every rank takes its
  // figures; when the probe does not fit, the parameters' costs, alike on every rank.
  std::vector<double> costs = layer_parameter_costs(*model_.stack);
  if (config_.parallel().pp_partition() == "measure") {
    std::vector<double> got(costs.size() + 1, 0.0);  // the costs, then 1 when measured
    if (grid_->rank() == 0) {
      try {
        ModelSpec probe = program.model(ctx);
        got = measure_layer_costs(*probe.stack, alloc_, b, T);
        got.push_back(1.0);
      } catch (const OutOfMemory& e) {
        log_.warn("the pipeline partition cannot time the layers (", e.what(),
                  "); it balances the parameters they read instead");
      }
    }
    MPI_CHECK(MPI_Bcast(got.data(), static_cast<int>(got.size()), MPI_DOUBLE, 0,
                        grid_->world_group().comm()));
    if (got.back() > 0) costs.assign(got.begin(), got.end() - 1);
  }
  PipelineOptions o;
  o.schedule = spec;
  if (device().is_cuda() || device_path_on_host()) o.device = PipeDevice{device(), device_.stream()};
  o.bounds = pipeline_bounds(config_, *model_.stack, spec, costs);
  if (leader()) {
    log_.info(describe_pipeline(config_, spec, o.bounds, costs));
    for (const std::string& line : describe_stages(config_, spec, *model_.stack, o.bounds, costs,
                                                   grid_->dp_size(), b, T)) {
      log_.info(line);
    }
  }
  ModelSpec layers = program.model(ctx);  // a second instance: its layers become the chunks
  auto factory = [this](LayerStack<float>& stack, int64_t norm_begin) {
    return make_engine(stack, norm_begin);
  };
  auto engine = std::make_unique<PipelineEngine>(*model_.stack, layers.stack->release_layers(), *grid_,
                                                 alloc_, work_alloc(), std::move(o), factory, &tracer_);
  pipeline_ = engine.get();
  engine_ = std::move(engine);
  engine_->initialize_parameters(model_.init);
}

void TrainSession::gather_stage_activation_bytes() {
  std::vector<double> planned(static_cast<size_t>(grid_->size()));
  const double mine = static_cast<double>(pipeline_->executor().planned_bytes());
  MPI_CHECK(MPI_Allgather(&mine, 1, MPI_DOUBLE, planned.data(), 1, MPI_DOUBLE,
                          grid_->world_group().comm()));
  planned.resize(static_cast<size_t>(grid_->pp_size()));  // replica 0's stages: ranks 0..P-1
  stage_activation_bytes_ = planned;
}

void TrainSession::setup_parallel() {
  const int dp = grid_->dp_size();
  if (grid_->size() > 1) {
    control_comm_ = std::make_unique<HostCommunicator>(grid_->world_group(),
                                                       CommOptions::from_config(config_.comm()));
  }
  if (dp > 1) {
    if (leader()) {
      const RankBatch& r0 = plan_->rank(0);
      log_.info("data parallel: ", dp, " ranks; rank 0 runs ", r0.accumulation,
                " micro-batch(es) of ", r0.micro_batch, " of the global batch ",
                plan_->global_batch(), "; ", engine_->describe());
    }
  }
  if (!config_.log().trace_file().empty()) {
    MPI_CHECK(MPI_Barrier(grid_->world_group().comm()));  // line the ranks' clocks up
    tracer_.enable(Clock::now());
    with_stack([this](auto& stack) {
      auto ctx = stack.context();
      ctx.tracer = &tracer_;
      stack.set_context(ctx);
    });
    ExecContext<float> ctx = model_.stack->context();
    ctx.tracer = &tracer_;
    for (int c = 0; pipeline_ && c < pipeline_->chunks(); ++c) pipeline_->chunk_stack(c).set_context(ctx);
  }
}

void TrainSession::log_memory() const {
  if (!leader()) return;
  const EngineMemory m = engine_->memory();
  log_.info("memory per rank: ", m.describe());
  std::string parts;
  for (const MemoryPart& p : memory_model_.parts(micro_batch_, recompute_)) {
    parts += (parts.empty() ? "" : ", ") + p.name + " " + format_bytes(static_cast<double>(p.bytes));
  }
  const RankBatch& r = rank_batch();
  log_.info("memory plan: micro-batch ", r.micro_batch, " x ", r.accumulation,
            config_.batch().micro_batch() == 0 ? " (auto)" : "", recompute_ ? ", recomputing activations" : "",
            "; planned peak ", format_bytes(static_cast<double>(predicted_peak())), " (", parts,
            ") of the budget ", format_bytes(static_cast<double>(work_alloc().stats().budget)));
}

void TrainSession::sum_over_ranks(double* values, int count) {
  if (!control_comm_) return;
  control_comm_->allreduce(TensorView::flat(values, count, DType::kF64), ReduceOp::kSum)->wait();
}

void TrainSession::run_pipeline(int64_t B, int64_t T) {
  const int r = grid_->dp_rank();
  const RankBatch& mine = plan_->rank(r);
  const int64_t stride = static_cast<int64_t>(mine.micro_batch) * T;
  std::vector<Batch> batches;
  std::vector<double> weights;
  for (uint64_t m = 0; m < mine.accumulation; ++m) {
    const SampleRange mb = plan_->micro_batch(position_.samples_seen, r, m);
    const int64_t b = static_cast<int64_t>(mb.count);
    int32_t* in = inputs_.data() + static_cast<int64_t>(m) * stride;
    int32_t* tg = targets_.data() + static_cast<int64_t>(m) * stride;
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
  const auto [in, tg] = staging_->stage_step(inputs_.data(), targets_.data(), tokens);
  for (Batch& b : batches) {
    const int64_t at = b.tokens - inputs_.data();
    b.tokens = in + at;
    b.targets = tg + at;
  }
  const int placed = pipeline_->placements();
  pipeline_->run_step(batches, weights, scalars_);  // the loss on the device, read with the norm
  if (pipeline_->placements() != placed && leader()) {
    const ActionCosts& c = pipeline_->measured_costs();
    char line[160];
    std::snprintf(line, sizeof line, "pipeline: the zb-v list placed again at the measured times (F %.2f ms, B %.2f ms, "
                  "W %.2f ms per chunk and micro-batch)", 1e3 * c.forward, 1e3 * c.backward_input, 1e3 * c.backward_weight);
    log_.info(line);
  }
  // Out of memory part-way: the rest of the step ran without compute (its transfers and
  // engine calls only); the step's sums carry the failure to every rank (train_step).
  if (step_oom_.empty()) step_oom_ = pipeline_->begin_failure();
  if (step_oom_.empty()) step_oom_ = pipeline_->executor().failure();
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
  const RankBatch& mine = plan_->rank(r);
  // On a GPU the loop only enqueues: where the step's compute time decides something
  // (shares, recomputation, the automatic batch), it waits for the stream at the end and
  // takes the wall time of all the micro-batches instead.
  const bool wait_for_device =
      device().is_cuda() && (goodput_ || recompute_trial_active() || balancer_);
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
      const SampleRange mb = plan_->micro_batch(position_.samples_seen, r, m);
      const int64_t b = static_cast<int64_t>(mb.count);
      {
        auto scope = tracer_.scope(TraceTrack::kData, "load batch", "data");
        data_->gather(mb.first, mb.count, std::span(inputs_).first(b * T),
                      std::span(targets_).first(b * T));
      }
      const Batch batch = staging_->stage(
          Batch{inputs_.data(), targets_.data(), b, T, 1.0 / static_cast<double>(B * T)});
      const auto c0 = Clock::now();
      // The loss stays where the model runs until the step reads it (step_loss).
      run_micro_batch(batch, b, B, m + 1 == mine.accumulation);
      staging_->done();
      if (m == 0 && mine.accumulation > 1) goodput_first_micro_batch(mb.count);
      const double took = std::chrono::duration<double>(Clock::now() - c0).count();
      slow_down(took);
      compute += took * slow_factor_;
    }
  } catch (const OutOfMemory& e) {
    step_oom_ = e.what();
    calls_->complete();
  }
  if (wait_for_device) {
    device_.synchronize();
    compute = std::chrono::duration<double>(Clock::now() - t0).count() * slow_factor_;
  }
  return compute;
}

StepStats TrainSession::train_step() {
  const auto t0 = Clock::now();
  if (host_state_ && device().is_cuda()) {
    throw InvalidArgument("the model was moved from the GPU to the host for generation; this "
                          "session trains no more steps");
  }
  if (faults_.fail_at_step >= 0 && static_cast<int64_t>(position_.step) == faults_.fail_at_step) {
    throw Error("rank " + std::to_string(grid_->rank()) + " fails at step " +
                std::to_string(faults_.fail_at_step) +
                " because ETR_FAIL_AT_STEP asks it to (a test of failure handling)");
  }
  if (faults_.fail_allocation_step == static_cast<int64_t>(position_.step) + 1) {
    alloc_.fail_event(faults_.fail_allocation_event);
    faults_.fail_allocation_step = -1;
  }
  const auto& lg = config_.log();
  tracer_.set_recording(tracer_.enabled() &&
                        (lg.trace_steps() == 0 || static_cast<int64_t>(position_.step) < lg.trace_steps()));
  acquire_activations();  // may redo the plan: an out-of-memory error agreed on by every rank
  const int64_t B = static_cast<int64_t>(plan_->global_batch()), T = data_->seq_len();
  const auto& s = config_.schedule();
  StepStats st;
  st.lr = goodput_ ? goodput_learning_rate()
                  : learning_rate(static_cast<int64_t>(position_.step), config_.optimizer().lr(),
                                  s.warmup_steps(), s.max_steps(), s.min_lr_ratio());
  engine_->begin_step();
  if (faults_.nonfinite_at_step == static_cast<int64_t>(position_.step) + 1) {
    // A NaN in this rank's gradient of the last tensor (backward accumulates into it, and
    // the engine sums it into every rank's).
    const LayerStack<float>& last =
        pipeline_ ? pipeline_->chunk_stack(pipeline_->chunks() - 1) : *model_.stack;
    if (!pipeline_ || pipeline_->holds_loss()) {
      poison_gradient(engine_->gradients() + last.layout().entries().back().offset);
    }
  }
  zero_step_loss();
  const double compute_seconds = run_micro_batches(B, T);
  fetch_step_loss();  // enqueued: it arrives with the norm
  st.comm = engine_->end_backward();
  st.grad_norm = engine_->grad_norm();  // on a GPU the step's one wait for the device
  // The sum over this rank's tokens of the per-token loss / (B T).
  const double loss_sum = step_loss();
  // The resize flag and "my gradient norm is not finite" ride on the loss's sum: the ranks
  // agree on them at no extra cost. The summed loss is finite on every rank or on none
  // (a NaN or an infinity in any term makes every rank's sum one), so together with the
  // summed flag every rank takes the same finite-or-stop decision.
  // A pipeline's measured bubble and norm wait ride along too (means over the ranks).
  // So does a rank's wish for another micro-batch (the memory budget, re-read here).
  // So do an automatic global batch's figures (no pipeline then): n_r |g_r|^2, the step's
  // compute seconds and the last optimizer step's.
  // And a rank's out-of-memory error inside the step.
  double sums[8] = {loss_sum, resize_requested() ? 1.0 : 0.0,
                    std::isfinite(st.grad_norm) ? 0.0 : 1.0, budget_wants_replan() ? 1.0 : 0.0,
                    pipeline_ ? pipeline_->executor().last_step().bubble() : 0.0,
                    pipeline_ ? pipeline_->norm_wait_seconds() : 0.0, 0.0,
                    step_oom_.empty() ? 0.0 : 1.0};
  if (goodput_) {
    sums[4] = goodput_local_term();
    sums[6] = last_optimizer_seconds_;
  }
  const bool timed = goodput_ || recompute_trial_active();
  if (timed) sums[5] = compute_seconds;
  sum_over_ranks(sums, 8);
  if (sums[7] > 0) {  // nothing of the step is kept: the same samples again, smaller
    recover_from_oom(std::exchange(step_oom_, std::string()));
    return train_step();
  }
  st.loss = sums[0];
  st.resize = sums[1] > 0;
  const bool replan_wanted = sums[3] > 0;
  if (pipeline_) {
    st.bubble = sums[4] / grid_->size();
    st.norm_wait_seconds = sums[5] / grid_->size();
    st.bubble_theory = pipeline_->theoretical_bubble();
  }
  if (!std::isfinite(st.loss) || sums[2] > 0) {
    skip_or_stop(st, std::isfinite(st.loss));  // throws unless the step may be skipped
  } else {
    checkpoints_->wait_for_snapshot();  // an async save may still be copying the state
    auto scope = tracer_.scope(TraceTrack::kCompute, "optimizer", "optimizer");
    const auto o0 = Clock::now();
    engine_->optimizer_step({static_cast<int64_t>(position_.step) + 1, st.lr, st.grad_norm,
                             config_.optimizer().grad_clip()});
    last_optimizer_seconds_ = std::chrono::duration<double>(Clock::now() - o0).count();
  }
  position_.advance(static_cast<uint64_t>(B));
  st.micro_batch = static_cast<int64_t>(rank_batch().micro_batch);
  st.accumulation = static_cast<int64_t>(rank_batch().accumulation);
  st.predicted_peak = predicted_peak();
  st.peak_bytes = work_alloc().stats().peak;
  measure_device_peak();
  st.device_peak_bytes = device_peak_;
  st.recompute = recompute_;
  release_activations();
  measure_outside();
  if (replan_wanted) replan();
  balance_shares(compute_seconds);
  recompute_trial_step(sums[5], static_cast<double>(B));
  if (goodput_) {
    const double n = static_cast<double>(grid_->size());
    st.global_batch = static_cast<int64_t>(plan_->global_batch());
    goodput_after_step(st.grad_norm, sums[4], sums[5] / n, sums[6] / n);
    st.noise_scale = noise_scale();
  }
  st.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return st;
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

}  // namespace etr
