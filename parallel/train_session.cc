// TrainSession: building a session (train_session.h); one optimizer step is in
// train_step.cc, the loop in train_loop.cc, checkpoints and resuming in
// session_checkpoint.cc.
#include "parallel/train_session.h"

#include <sched.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "parallel/device_engine.h"
#include "parallel/pipeline_setup.h"
#include "runtime/adamw.h"
#include "runtime/bytes.h"
#include "runtime/cpu_affinity.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/mpi_check.h"
#include "runtime/state_names.h"
#include "runtime/control_ops.h"

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

// The session's build, phase by phase, for one line at the end: where a start (and every
// relaunch) spends its time.
class StartupPhases {
 public:
  void mark(const char* phase) {
    const Clock::time_point now = Clock::now();
    text_ += text_.empty() ? "" : ", ";
    char ms[32];
    std::snprintf(ms, sizeof ms, " %.0f ms",
                  std::chrono::duration<double, std::milli>(now - last_).count());
    text_.append(phase).append(ms);
    last_ = now;
  }
  double seconds() const { return std::chrono::duration<double>(last_ - start_).count(); }
  const std::string& text() const { return text_; }

 private:
  Clock::time_point start_ = Clock::now(), last_ = start_;
  std::string text_;
};

}  // namespace

TrainSession::TrainSession(const TrainConfig& config, const Group& group, Logger& log,
                           const TrainProgram& program, ElasticReporter* elastic)
    : config_(config),
      log_(log),
      // (the pipeline's schedule checked before the grid's communicators are split)
      grid_((check_pipeline_layout(config, group.size()),
             std::make_unique<ProcessGrid>(group, config.parallel().pp()))),
      program_(program) {
  StartupPhases phases;
  phases.mark("process grid");
  // The tests' hooks (parallel/fault_injection.h) before anything is built; a budget
  // cut acts from the first step on, not while the session is set up.
  faults_ = FaultInjection::from_env(grid_->rank());
  const FaultInjection::BudgetCut cut = std::exchange(faults_.budget_cut, {});
  // The budget before anything is allocated: the smallest of the config's, the
  // environment's and the job's memory cgroup's share (runtime/memory_budget.h).
  mem_.budget = std::make_unique<MemoryBudget>(config_.runtime().memory_budget(),
                                           ranks_on_this_node(group));
  read_budget();
  setup_device(group);  // runtime.device: the stream and allocator the model is built for
  phases.mark("budget and device");
  // Every rank needs at least one sequence (checked alike on every rank, before anything
  // is built); the data is checked against the batch once it is loaded.
  setup_batch();
  build(program, group);
  phases.mark("model and data");
  setup_parallel();
  log_memory();
  phases.mark("parallel setup");
  checkpoints_ = std::make_unique<CheckpointCadence>(config_, *grid_, log_, data_->seq_len());
  if (program.attachments) checkpoints_->set_attachments(program.attachments(config_));
  elastic_ = std::make_unique<ElasticSession>(elastic, *grid_, log_);
  phases.mark("checkpoint writers");
  resume();
  phases.mark(resumed_from_ ? "restore" : "no restore");
  if (leader()) {
    char total[32];
    std::snprintf(total, sizeof total, "%.2f s", phases.seconds());
    log_.info("start-up: the session was built in ", total, " (rank 0: ", phases.text(), ")");
  }
  elastic_->ready(position_.step, batch_->micro_batch());
  reporter_ = std::make_unique<StepReporter>(config_, log_, leader(), resumed_from_.has_value());
  reporter_->launched(position_.step, grid_->size(), elastic_->launch(), resumed_from_);
  faults_.budget_cut = cut;
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
  dev_.nccl = choose_nccl();
  place_stack(*model_.stack);
  if (dev_.mixed) place_stack(*model_.stack_bf16);
  const int64_t T = config_.model().seq_len();
  if (leader()) log_.info("model: ", model_.description);
  if (grid_->pp_size() > 1) {
    build_pipeline(program, ctx);
  } else {
    if (dev_.mixed) {  // DeviceEngine on either device: the bf16 copy beside the f32 state
      DataParallelOptions dp = data_parallel_options(config_);
      dp.nccl = dev_.nccl;
      engine_ = std::make_unique<DeviceEngine>(*model_.stack_bf16, work_alloc(), dev_.context.stream(),
                                               std::move(dp), grid_.get(), &tracer_);
    } else {
      engine_ = make_engine(*model_.stack);
    }
    init_deferred_ = !config_.checkpoint().resume().empty();
    if (!init_deferred_) engine_->initialize_parameters(model_.init);
  }
  data_ = program.data(ctx);
  if (data_->seq_len() != T) {
    throw ConfigError("the data source gives samples of " + std::to_string(data_->seq_len()) +
                      " tokens but model.seq_len is " + std::to_string(T));
  }
  batch_->set_train_samples(data_->train_samples());
  position_.seed = data_->seed();
  if (!pipeline_) {
    calls_ = std::make_unique<EngineCallLog>(*engine_, model_.stack->size());
    hooks_ = calls_->hooks();
  }
  if (config_.runtime().cuda_graphs() && device().is_cuda() && !pipeline_) {
    dev_.graphs = std::make_unique<CudaGraphCache>(device(), dev_.context.stream());
  }
  setup_memory();  // the micro-batch, and a pipeline's plan (the token buffers sized for it)
  dev_.staging = std::make_unique<TokenStaging>(device(), work_alloc(), dev_.context.stream(), batch_->micro_batch() * T);
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
    control::broadcast(got.data(), static_cast<int>(got.size()), MPI_DOUBLE, 0, grid_->world_group().comm(),
                       "the pipeline's layer costs (train_session)");
    if (got.back() > 0) costs.assign(got.begin(), got.end() - 1);
  }
  PipelineOptions o;
  o.schedule = spec;
  if (device().is_cuda() || device_path_on_host()) o.device = PipeDevice{device(), dev_.context.stream()};
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
  control::allgather(&mine, 1, MPI_DOUBLE, planned.data(), grid_->world_group().comm(),
                     "the stages' activation bytes (train_session)");
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
      const RankBatch& r0 = batch_plan().rank(0);
      log_.info("data parallel: ", dp, " ranks; rank 0 runs ", r0.accumulation,
                " micro-batch(es) of ", r0.micro_batch, " of the global batch ",
                batch_plan().global_batch(), "; ", engine_->describe());
    }
  }
  if (!config_.log().trace_file().empty()) {
    control::barrier(grid_->world_group().comm(), "the trace's start (train_session)");  // clocks lined up
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
  for (const MemoryPart& p : memory_model().parts(micro_batch(), recompute())) {
    parts += (parts.empty() ? "" : ", ") + p.name + " " + format_bytes(static_cast<double>(p.bytes));
  }
  const RankBatch& r = rank_batch();
  log_.info("memory plan: micro-batch ", r.micro_batch, " x ", r.accumulation,
            config_.batch().micro_batch() == 0 ? " (auto)" : "", recompute() ? ", recomputing activations" : "",
            "; planned peak ", format_bytes(static_cast<double>(predicted_peak())), " (", parts,
            ") of the budget ", format_bytes(static_cast<double>(work_alloc().stats().budget)));
}

void TrainSession::sum_over_ranks(double* values, int count) {
  if (!control_comm_) return;
  control_comm_->allreduce(TensorView::flat(values, count, DType::kF64), ReduceOp::kSum)->wait();
}

}  // namespace etr
