#include "parallel/data_parallel_engine.h"

#include <chrono>

#include "runtime/bytes.h"
#include "runtime/state_names.h"

namespace etr {

StackHooks Engine::hooks() {
  StackHooks h;
  h.before_forward = [this](int layer) { before_forward(layer); };
  h.before_backward = [this](int layer) { before_backward(layer); };
  h.after_backward = [this](int layer) { layer_grads_final(layer); };
  return h;
}

namespace {

// The gradient communicator's defaults (the caller's settings win where given).
CommOptions gradient_comm_options(CommOptions o) {
  o.inline_bytes = 0;  // buckets never block backward
  // The progress thread shares the cores with backward: when a bucket waits for a peer it
  // spins briefly, then sleeps (never yields: a yield takes the core straight back from
  // the compute thread). Measured with etr-bench dp, docs/architecture.md.
  if (o.spin_polls < 0) o.spin_polls = 64;
  if (o.yield_polls < 0) o.yield_polls = 0;
  if (o.max_idle_sleep.count() < 0) o.max_idle_sleep = std::chrono::microseconds(200);
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
      options_(std::move(options)) {
  for (std::string_view s : {state::kParam, state::kGrad, state::kAdamM, state::kAdamV}) {
    state_.add(s);
  }
  stack_.bind(state_);
  if (grid_.dp_size() > 1) {
    comm_ = std::make_unique<HostCommunicator>(grid_.dp_group(),
                                               gradient_comm_options(options_.comm));
    reducer_ = std::make_unique<BucketReducer>(stack_.layout(), grads(), *comm_,
                                               options_.buckets, tracer);
  }
}

DataParallelEngine::~DataParallelEngine() = default;

float* DataParallelEngine::grads() { return state_.data<float>(state::kGrad); }

void DataParallelEngine::broadcast_parameters() {
  if (comm_) {
    etr::broadcast_parameters(*comm_, state_.data<float>(state::kParam), stack_.layout().numel());
  }
}

std::string DataParallelEngine::describe() const {
  if (!reducer_) return "one rank, no gradient communication";
  const BucketOptions& b = options_.buckets;
  return std::to_string(reducer_->buckets().size()) + " gradient buckets (first " +
         format_bytes(static_cast<double>(b.first_bucket_bytes)) + ", then " +
         format_bytes(static_cast<double>(b.bucket_cap_bytes)) + "), overlap " +
         (b.overlap ? "on" : "off");
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

double DataParallelEngine::grad_norm() {
  // Every rank holds the summed gradients: its own norm is the global one.
  return etr::grad_norm(grads(), stack_.layout().numel());
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
