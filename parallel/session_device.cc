// TrainSession: the device the model trains on (train_session.h; runtime.device): the
// choice, its allocator and stream, the precision (runtime.precision) and the gradients'
// backend on GPUs (comm.device_backend), a micro-batch's run (through CUDA graphs when
// asked), the step's loss kept on the device and read once, and the end of a GPU run's
// move of the model to the host (for the text sample), and the engine each stack gets on
// that device (make_engine).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "parallel/train_session.h"
#include "parallel/device_engine.h"
#include "parallel/zero_engine.h"
#include "runtime/bytes.h"
#include "runtime/cpu_affinity.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/mpi_check.h"
#include "runtime/state_names.h"
#include "runtime/env.h"
#include "runtime/control_ops.h"

namespace etr {

void TrainSession::setup_device(const Group& group) {
  const auto& rt = config_.runtime();
  const int local = rank_on_this_node(group);  // (collectives: every rank asks)
  const int local_ranks = ranks_on_this_node(group);
  int visible = rt.device() == "cpu" ? 0 : visible_cuda_devices();
  // Every rank alike: the fewest GPUs any rank sees decides (a job is on GPUs or not).
  int fewest = visible;
  control::allreduce(&fewest, 1, MPI_INT, MPI_MIN, group.comm(), "the GPUs every rank sees (session_device)");
  if (rt.device() == "cuda" && visible > 0 && fewest == 0) {
    throw ConfigError("runtime.device = cuda but another rank of this job sees no GPU; run every "
                      "rank where it sees one, or use runtime.device = cpu.");
  }
  if (fewest == 0) visible = 0;
  const Device d = choose_device(rt.device(), local, visible);
  set_gpu_matmul(rt.gpu_matmul());
  dev_.context = DeviceContext::open(d);
  if (d.is_cuda()) {
    dev_.driver_base = dev_.context.driver_used_bytes();
    dev_.alloc = make_device_allocator(d);
    // ETR_CUDA_MEMORY_BUDGET, else free now; shared by the ranks of this node on this GPU
    // (local ranks r with r % visible == local % visible).
    dev_.sharing = (local_ranks - local % visible + visible - 1) / visible;
    dev_.budget = dev_.alloc->stats().budget / static_cast<size_t>(dev_.sharing);
    read_device_budget(SIZE_MAX);
    dev_.scalars_buffer = Buffer(*dev_.alloc, 2 * sizeof(double));
    dev_.scalars = static_cast<double*>(dev_.scalars_buffer.data());
    log_.info("rank ", grid_->rank(), ": device ", d.str(), ": ", dev_.context.describe(),
              "; f32 products in ", rt.gpu_matmul(), "; device memory budget ",
              format_bytes(static_cast<double>(dev_.budget)),
              dev_.sharing > 1 ? " (the GPU's share of " + std::to_string(dev_.sharing) + " ranks)" : "",
              " (the allocator's: that less cuBLAS's 32 MiB workspace, and cuBLASLt's under bf16)");
  }
  dev_.loss_copy = PinnedBuffer(d, sizeof(double));
}

// The device's budget: ETR_CUDA_MEMORY_BUDGET when set (read again at every step
// boundary), else the device's free memory when the session began, either divided among
// the ranks of the node that share the GPU; at most `cut` (the
// test's, ETR_TEST_BUDGET_CUT). The allocator gets it less cuBLAS's workspace (and the bf16
// set's cuBLASLt one), which the handles hold outside it (NVIDIA's figure for Hopper, cublasSetWorkspace's
// documentation), so that the memory model, which plans what the allocator holds, fits
// the device.
void TrainSession::read_device_budget(size_t cut) {
  // cuBLAS's workspace, and under bf16 (or auto, which is bf16 on a GPU) the bf16 set's
  // cuBLASLt workspace of the same size (runtime/kernels/cuda/bf16/cublaslt.h).
  const size_t outside = (size_t{32} << 20) * (dev_.mixed ? 2 : 1);
  size_t bytes = dev_.budget;
  const char* v = env_value("ETR_CUDA_MEMORY_BUDGET");
  if (const auto set = budget_setting(v ? v : "", "ETR_CUDA_MEMORY_BUDGET")) {
    bytes = *set / static_cast<size_t>(dev_.sharing);
  }
  bytes = std::min(bytes, cut);
  const size_t budget = bytes > outside ? bytes - outside : 0;
  const size_t before = dev_.alloc->stats().budget;
  if (budget == before) return;
  const double moved = std::fabs(static_cast<double>(budget) - static_cast<double>(before));
  if (dev_.budget_read && moved > 0.05 * static_cast<double>(before)) {
    log_.info("rank ", grid_->rank(), ": device memory budget ",
              format_bytes(static_cast<double>(before + outside)), " -> ",
              format_bytes(static_cast<double>(bytes)), " (",
              cut != SIZE_MAX && bytes == cut ? "ETR_TEST_BUDGET_CUT" : "ETR_CUDA_MEMORY_BUDGET", ")");
  }
  dev_.alloc->set_budget(budget);
  dev_.budget_read = true;
}

template <typename Real>
void TrainSession::place_stack(LayerStack<Real>& stack) {
  ExecContext<Real> ctx = stack.context();
  ctx.device = device();
  ctx.alloc = &work_alloc();
  ctx.stream = dev_.context.stream();
  ctx.kernels = &kernels_for<Real>(device());
  stack.set_context(ctx);
}

template void TrainSession::place_stack(LayerStack<float>&);
template void TrainSession::place_stack(LayerStack<bf16>&);

// comm.device_backend: nccl needs a GPU to every rank (NCCL refuses two ranks on one) and
// each rank's gradient norm before the sum is not measured on its path (the automatic
// global batch needs it); auto takes nccl where both hold and there is someone to sum
// with. Every rank alike: the most ranks sharing a GPU anywhere decides.
bool TrainSession::choose_nccl() {
  if (!device().is_cuda()) return false;
  const std::string& backend = config_.comm().device_backend();
  int most_sharing = dev_.sharing;
  control::allreduce(&most_sharing, 1, MPI_INT, MPI_MAX, grid_->world_group().comm(),
                     "the ranks sharing a GPU (session_device)");
  if (backend == "nccl" && most_sharing > 1) {
    throw ConfigError("comm.device_backend = nccl needs a GPU of its own for every rank, but " +
                      std::to_string(most_sharing) +
                      " ranks share a GPU here; use comm.device_backend = staged (or auto).");
  }
  const bool nccl = backend == "nccl" || (backend == "auto" && most_sharing == 1 && grid_->dp_size() > 1);
  if (leader() && grid_->dp_size() > 1) {
    log_.info("gradients on the GPUs: ", nccl ? "NCCL" : "staged through the host",
              " (comm.device_backend = ", backend, ")");
  }
  return nccl;
}

namespace {

// The bf16 twin must declare the fp32 stack's layout: checkpoints, exports and the logs
// read the fp32 one's, while the state is bound by the bf16 one's.
void check_same_layout(const ParamLayout& a, const ParamLayout& b) {
  bool same = a.numel() == b.numel() && a.entries().size() == b.entries().size();
  for (size_t i = 0; same && i < a.entries().size(); ++i) {
    const TensorEntry &x = a.entries()[i], &y = b.entries()[i];
    same = x.name == y.name && x.offset == y.offset && x.shape == y.shape;
  }
  if (!same) throw InvalidArgument("the model's bf16 layers declare another layout than its fp32 ones");
}

}  // namespace

// runtime.precision: bf16 asks for mixed precision on either device (on the host, the
// reference of the GPU's kernels), auto takes it on a GPU when the model has bf16 layers
// and the layout is data parallel, fp32 never.
void TrainSession::choose_precision() {
  const std::string& p = config_.runtime().precision();
  std::string why;  // what mixed precision cannot have yet
  if (!model_.stack_bf16) {
    why = "this program's model has no bf16 layers";
  } else if (grid_->pp_size() > 1) {
    why = "parallel.pp = " + std::to_string(grid_->pp_size());
  } else if (config_.parallel().zero_stage() > 0) {
    why = "parallel.zero_stage = " + std::to_string(config_.parallel().zero_stage());
  }
  if (p == "bf16" && !why.empty()) {
    throw ConfigError("runtime.precision = bf16 is not available here: " + why +
                      " (bf16 trains data parallel, without ZeRO or pipeline stages, for now); "
                      "use runtime.precision = fp32.");
  }
  dev_.mixed = p == "bf16" || (p == "auto" && device().is_cuda() && why.empty());
  if (dev_.mixed) check_same_layout(model_.stack->layout(), model_.stack_bf16->layout());
  if (dev_.mixed && device().is_cuda()) read_device_budget(SIZE_MAX);  // the cuBLASLt workspace too
  if (leader()) {
    log_.info("precision: ", dev_.mixed ? "bf16 (mixed: bf16 activations and parameter copy, f32 "
                                      "master parameters, gradients and AdamW state)"
                                    : "fp32",
              p == "auto" && !dev_.mixed && device().is_cuda() ? " (runtime.precision = auto: " + why + ")"
                                                           : std::string());
  }
}

// A micro-batch's forward and backward on the training stack, replayed from a CUDA graph
// under runtime.cuda_graphs (runtime/cuda_graph.h).
void TrainSession::run_micro_batch(const Batch& batch, int64_t b, int64_t B, bool last) {
  with_stack([&](auto& stack) {
    auto work = [&] {
      stack.forward_accumulate(batch, dev_.scalars, static_cast<double>(b), static_cast<double>(B), hooks_);
      calls_->begin_backward(last);
      stack.backward(batch, hooks_);
    };
    // Captured only where backward's hooks do nothing on the host (no reducer: one rank).
    // The activations go back to the allocator after every step and usually come back at
    // the same addresses: a graph stays valid as long as they do and the plan that laid
    // them out (micro_batch_, T, recompute_) is the same, so all of that is in its key.
    if (!dev_.graphs || engine_->reducer() != nullptr) return work();
    auto id = [](const void* p) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(p)); };
    dev_.graphs->run({id(batch.tokens), id(batch.targets), batch.B, batch.T, b, B, id(dev_.scalars),
                  id(stack.activations_data()), id(stack.scratch_data()), last ? 1 : 0,
                  recompute() ? 1 : 0, micro_batch()},
                 work);
  });
}

// The loss of a step: zeroed before its micro-batches, which add theirs on the device
// (LayerStack::forward_accumulate); its copy to the host is enqueued after the last
// backward and read after the gradient norm's wait, so the step waits for the device once.
void TrainSession::zero_step_loss() {
  device_ops(device()).zero(dev_.scalars, sizeof(double), dev_.context.stream());
}

void TrainSession::fetch_step_loss() {
  device_ops(device()).download(dev_.loss_copy.data(), dev_.scalars, sizeof(double), dev_.context.stream());
}

double TrainSession::step_loss() {
  dev_.context.synchronize();  // (after the norm's wait: nothing is left to wait for)
  return *dev_.loss_copy.as<double>();
}

void TrainSession::poison_gradient(float* at) {
  const float nan = std::nanf("");
  device_ops(device()).upload(at, &nan, sizeof nan, dev_.context.stream());
}

double TrainSession::gradient_sq_norm(const float* g, int64_t n) {
  const DeviceOps& ops = device_ops(device());
  double host = 0;
  ops.grad_norm_squared(dev_.scalars + 1, g, n, dev_.context.stream());
  ops.download(&host, dev_.scalars + 1, sizeof host, dev_.context.stream());
  ops.synchronize(dev_.context.stream());
  return host;
}

void TrainSession::measure_device_peak() {
  if (!device().is_cuda()) return;
  const size_t used = dev_.context.driver_used_bytes();
  dev_.peak = std::max(dev_.peak, used > dev_.driver_base ? used - dev_.driver_base : 0);
}

LayerStack<float>& TrainSession::host_stack() {
  move_stack_to_host();
  LayerStack<float>& stack = *model_.stack;
  // Between steps the training activations are back with the allocator: one sequence's.
  if (stack.in_flight() == 0) stack.plan(alloc_, 1, data_->seq_len());
  return stack;
}

// At the end of a GPU run, before the text sample: the fp32 stack runs on the host from a
// copy of the parameters (generation reads the logits on the host), and the session
// trains no more. Under bf16 on the host the fp32 twin is bound to a copy of the master,
// taken again at every call, and training goes on.
void TrainSession::move_stack_to_host() {
  if (device().is_cpu() && !dev_.mixed) return;
  LayerStack<float>& stack = *model_.stack;
  if (device().is_cpu()) {
    if (!dev_.host_state) {
      dev_.host_state = std::make_unique<FlatState>(stack.layout(), alloc_);
      dev_.host_state->add(state::kParam);
      dev_.host_state->add(state::kGrad);
      stack.bind(*dev_.host_state);
    }
    engine_->gather_state(state::kParam, dev_.host_state->data<float>(state::kParam));
    return;
  }
  if (dev_.host_state) return;
  stack.release();
  dev_.host_state = std::make_unique<FlatState>(stack.layout(), alloc_);
  dev_.host_state->add(state::kParam);
  dev_.host_state->add(state::kGrad);
  if (pipeline_) {  // materialize_parameters() gathered the whole model here (world rank 0)
    std::memcpy(dev_.host_state->data<float>(state::kParam), pipeline_->parameters(),
                static_cast<size_t>(stack.layout().numel()) * sizeof(float));
  } else {
    engine_->gather_state(state::kParam, dev_.host_state->data<float>(state::kParam));
  }
  ExecContext<float> ctx = stack.context();
  ctx.device = Device::cpu();
  ctx.alloc = &alloc_;
  ctx.stream = nullptr;
  ctx.kernels = &kernels_for<float>(Device::cpu());
  stack.set_context(ctx);
  stack.bind(*dev_.host_state);
}

DataParallelOptions data_parallel_options(const TrainConfig& c) {
  DataParallelOptions o;
  o.buckets.first_bucket_bytes = parse_bytes(c.parallel().first_bucket_size());
  o.buckets.bucket_cap_bytes = parse_bytes(c.parallel().bucket_size());
  o.buckets.overlap = c.parallel().overlap();
  o.comm = CommOptions::from_config(c.comm());
  o.adamw = AdamWOptions{c.optimizer().lr(), c.optimizer().beta1(), c.optimizer().beta2(),
                         c.optimizer().eps(), c.optimizer().weight_decay()};
  return o;
}

// ETR_TEST_HOST_DEVICE_ENGINE=1 (tests): the GPU's engines (DeviceEngine, ZeroEngine's
// device path), the staged communicators and a pipeline's staged transfers on host memory.
bool TrainSession::device_path_on_host() const {
  return device().is_cpu() && faults_.host_device_engine;
}

std::unique_ptr<Engine> TrainSession::make_engine(LayerStack<float>& stack, int64_t norm_begin) {
  const int stage = config_.parallel().zero_stage();
  DataParallelOptions dp = data_parallel_options(config_);
  dp.norm_begin = norm_begin;
  const bool test_on_host = device_path_on_host();
  const bool device_path = device().is_cuda() || test_on_host;
  dp.nccl = device_path && dev_.nccl;
  if (device_path && stage == 0) {
    return std::make_unique<DeviceEngine>(stack, work_alloc(), dev_.context.stream(), dp, grid_.get(), &tracer_);
  }
  if (stage == 0) return std::make_unique<DataParallelEngine>(stack, *grid_, alloc_, dp, &tracer_);
  ZeroOptions o;
  o.stage = stage;
  o.dp = dp;
  o.log = leader() ? &log_ : nullptr;
  o.prefetch_bytes = parse_bytes(config_.parallel().zero_prefetch_size());
  // A pipeline stage runs 2 m passes per step: its parameters are gathered once.
  o.gather_once_per_step = grid_->pp_size() > 1;
  o.staged = test_on_host;
  return std::make_unique<ZeroEngine>(stack, *grid_, work_alloc(), std::move(o), &tracer_, dev_.context.stream());
}

}  // namespace etr
