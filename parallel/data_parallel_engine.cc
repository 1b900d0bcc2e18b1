#include "parallel/data_parallel_engine.h"

#include <algorithm>
#include <chrono>

#include "collectives/host_topology.h"
#include "runtime/bytes.h"
#include "runtime/state_names.h"

namespace etr {

CommOptions gradient_comm_options(CommOptions o) {
  o.inline_bytes = 0;  // buckets never block backward
  // The ring for every bucket, small ones too: its segments are ZeRO's blocks, so every
  // stage sums alike (parallel/zero_plan.h).
  if (o.allreduce_algo == AllreduceAlgo::kAuto) o.allreduce_algo = AllreduceAlgo::kRing;
  // The progress thread shares the cores with backward: when a bucket waits for a peer it
  // spins briefly, then sleeps (never yields: a yield takes the core straight back from
  // the compute thread). Measured with etr-bench dp, docs/architecture.md.
  if (o.spin_polls < 0) o.spin_polls = 64;
  if (o.yield_polls < 0) o.yield_polls = 0;
  if (o.max_idle_sleep.count() < 0) o.max_idle_sleep = std::chrono::microseconds(200);
  return o;
}

namespace {

// The gradient buckets' options: gradient_comm_options, except that across hosts of >= 2
// ranks each (left to auto) every bucket takes the hierarchical allreduce, 1.4x the ring
// there (docs/architecture.md); its sums then agree with ZeRO's within rounding instead of
// bit for bit. Collective over `group` (the hosts it spans).
CommOptions bucket_comm_options(const Group& group, const CommOptions& asked) {
  CommOptions o = gradient_comm_options(asked);
  if (asked.allreduce_algo != AllreduceAlgo::kAuto) return o;
  const HostTopology hosts = discover_host_topology(group);
  if (hosts.hierarchical_possible() && hosts.ranks_per_node() >= 2) {
    o.allreduce_algo = AllreduceAlgo::kHierarchical;
  }
  return o;
}

}  // namespace

DataParallelEngine::DataParallelEngine(LayerStack<float>& stack, const ProcessGrid& grid,
                                       Allocator& alloc, DataParallelOptions options,
                                       Tracer* tracer)
    : stack_(stack),
      grid_(grid),
      state_(stack.layout(), alloc),
      adamw_(stack.layout()),
      options_(std::move(options)),
      plan_(stack.layout(), grid.dp_size(), options_.buckets) {
  options_.buckets.shard_ranks = grid_.dp_size();
  for (std::string_view s : {state::kParam, state::kGrad, state::kAdamM, state::kAdamV}) {
    state_.add(s);
  }
  stack_.bind(state_);
  if (grid_.dp_size() > 1) {
    comm_ = std::make_unique<HostCommunicator>(grid_.dp_group(),
                                               bucket_comm_options(grid_.dp_group(), options_.comm));
    reducer_ = std::make_unique<BucketReducer>(stack_.layout(), grads(), *comm_,
                                               options_.buckets, tracer);
  }
}

DataParallelEngine::~DataParallelEngine() = default;

float* DataParallelEngine::grads() { return state_.data<float>(state::kGrad); }

void DataParallelEngine::initialize_parameters(
    const std::function<void(const ParamLayout&, float*)>& init) {
  if (init) init(stack_.layout(), state_.data<float>(state::kParam));
  broadcast_parameters();
}

float* DataParallelEngine::parameters() { return state_.data<float>(state::kParam); }

std::vector<HeldState> DataParallelEngine::held_states() {
  std::vector<HeldState> out;
  for (std::string_view s : {state::kParam, state::kAdamM, state::kAdamV}) {
    out.push_back({std::string(s), &state_});
  }
  return out;
}

void DataParallelEngine::gather_state(std::string_view name, float* out) {
  const float* s = state_.data<float>(name);
  std::copy(s, s + stack_.layout().numel(), out);
}

EngineMemory replica_memory(const ParamLayout& layout, int64_t held_numel, int ranks) {
  EngineMemory m;
  m.ranks = ranks;
  m.psi = layout.param_count();
  const size_t each = static_cast<size_t>(held_numel) * sizeof(float);
  m.params = each;
  m.grads = each;
  m.optimizer = 2 * each;
  return m;
}

EngineMemory DataParallelEngine::memory() const {
  return replica_memory(stack_.layout(), state_.held_numel(), grid_.dp_size());
}

void DataParallelEngine::broadcast_parameters() {
  if (comm_) {
    etr::broadcast_parameters(*comm_, state_.data<float>(state::kParam), stack_.layout().numel());
  }
}

std::string DataParallelEngine::describe() const {
  if (!reducer_) return "one rank, no gradient communication";
  const BucketOptions& b = options_.buckets;
  // The algorithm of the full buckets (a smaller first bucket may take another).
  const char* algo = allreduce_algo_name(comm_->choose_allreduce(b.bucket_cap_bytes));
  return std::to_string(reducer_->buckets().size()) + " gradient buckets (first " +
         format_bytes(static_cast<double>(b.first_bucket_bytes)) + ", then " +
         format_bytes(static_cast<double>(b.bucket_cap_bytes)) + "), overlap " +
         (b.overlap ? "on" : "off") + ", allreduce " + algo + " on " + comm_->topology().str();
}

void DataParallelEngine::begin_step() { state_.zero(state::kGrad); }

void DataParallelEngine::begin_backward(bool last) {
  if (last && reducer_) reducer_->begin_step();
}

void DataParallelEngine::layer_grads_final(int layer) {
  // Only the last micro-batch armed the reducer; earlier ones just accumulate.
  if (reducer_ && reducer_->armed()) reducer_->layer_ready(layer);
}

ReduceStats DataParallelEngine::end_backward() {
  return reducer_ ? reducer_->finish() : ReduceStats{};
}

std::vector<GradRange> DataParallelEngine::reduced_gradients(bool owned) {
  std::vector<GradRange> out;
  if (!owned) return {{HeldRange{0, stack_.layout().numel()}, grads()}};
  for (const HeldRange& h : plan_.norm_ranges(grid_.dp_rank())) out.push_back({h, grads() + h.begin});
  return out;
}

double DataParallelEngine::grad_norm() {
  // Every rank holds the summed gradients: it adds every rank's ZeRO partial itself, in
  // rank order, so that the norm (and the clipping) is bitwise the ZeRO stages'.
  std::vector<double> partials(static_cast<size_t>(plan_.ranks()));
  const float* g = grads();
  for (int r = 0; r < plan_.ranks(); ++r) {
    partials[r] = plan_.partial_norm(r, [&](const HeldRange& h) { return g + h.begin; },
                                    options_.norm_begin);
  }
  return norm_from_partials(partials);
}

void DataParallelEngine::optimizer_step(const OptimizerStep& s) {
  const int64_t n = stack_.layout().numel();
  clip_grad_norm(grads(), n, s.grad_norm, s.max_norm);
  for (size_t i = 0; i < state_.held().size(); ++i) {
    const HeldRange& r = state_.held()[i];
    adamw_.update_range(r.begin, r.end, state_.range<float>(state::kParam, i),
                        state_.range<float>(state::kGrad, i), state_.range<float>(state::kAdamM, i),
                        state_.range<float>(state::kAdamV, i), s.t, s.lr, options_.adamw);
  }
}

std::vector<NamedState> DataParallelEngine::states() {
  std::vector<NamedState> out;
  for (std::string_view s : {state::kParam, state::kAdamM, state::kAdamV}) {
    out.push_back({std::string(s), state_.data<float>(s)});
  }
  return out;
}

}  // namespace etr
