// ZeroEngine: one optimizer step and the states a checkpoint saves (zero_engine.h).
#include <algorithm>
#include <cstring>

#include "checkpoint/shard_plan.h"
#include "parallel/zero_engine.h"
#include "runtime/adamw.h"
#include "runtime/state_names.h"

namespace etr {

void ZeroEngine::begin_step() {
  add_optimizer_states();  // stage 3 without initialize_parameters()
  if (layers_) layers_->release_all();  // parameters materialized since the last step
  if (layers_ && options_.gather_once_per_step) layers_->launch_all();
  if (grad_window_) {
    grad_window_->drop_all();
    std::fill(grad_held_.begin(), grad_held_.end(), 0);
    grad_held_bytes_ = 0;
  } else {
    replica_->zero(state::kGrad);
  }
}

void ZeroEngine::begin_backward(bool last) {
  if (last) reducer_->begin_step();
}

void ZeroEngine::before_forward(int layer) {
  if (layers_ && !options_.gather_once_per_step) return layers_->before(false, layer);
  for (size_t b : needed_.at(layer)) gather_->wait(b);  // this step's parameters are in
}

void ZeroEngine::before_backward(int layer) {
  if (layers_ && options_.gather_once_per_step) {
    for (size_t b : layers_->needed(layer)) gather_->wait(b);
  } else if (layers_) {
    layers_->before(true, layer);
  }
  if (!grad_window_) return;
  for (size_t b : needed_.at(layer)) {
    if (grad_held_[b]) continue;
    const Bucket& k = plan_.buckets()[b];
    grad_window_->acquire(k.begin, k.end);
    grad_held_[b] = 1;
    grad_held_bytes_ += static_cast<size_t>(k.numel()) * sizeof(float);
  }
}

// The gradient window stays within grad_window_cap() once a layer is done: when the
// reductions fall behind backward, backward waits for the oldest (as FSDP's rate limiter
// does for its gathers), so the window's memory does not depend on the network's speed.
void ZeroEngine::layer_grads_final(int layer) {
  if (!reducer_->armed()) return;
  reducer_->layer_ready(layer);
  while (grad_window_ && grad_held_bytes_ > grad_window_cap() && reducer_->wait_oldest()) {
  }
}

size_t ZeroEngine::grad_window_cap() const {
  return largest_layer_bytes() + 2 * options_.dp.buckets.bucket_cap_bytes;
}

void ZeroEngine::reduced(size_t b) {
  if (!grad_window_) return;
  const Bucket& k = plan_.buckets()[b];
  // A replicated bucket was allreduced in place: every rank keeps all of it.
  if (k.replicated) std::memcpy(held(state::kGrad, b), full_grads_ + k.begin, k.numel() * sizeof(float));
  if (grad_held_[b]) {
    grad_window_->release(k.begin, k.end);
    grad_held_[b] = 0;
    grad_held_bytes_ -= static_cast<size_t>(k.numel()) * sizeof(float);
  }
}

ReduceStats ZeroEngine::end_backward() {
  const ReduceStats s = reducer_->finish();
  if (layers_) layers_->end_step();
  return s;
}

std::vector<GradRange> ZeroEngine::reduced_gradients(bool owned) {
  std::vector<GradRange> out;
  const std::vector<HeldRange> ranges =
      owned ? plan_.norm_ranges(grid_.dp_rank()) : plan_.held(grid_.dp_rank());
  for (const HeldRange& h : ranges) out.push_back({h, grad_of(h)});
  return out;
}

double ZeroEngine::grad_norm() {
  const int n = plan_.ranks();
  double mine = plan_.partial_norm(grid_.dp_rank(), [&](const HeldRange& h) { return grad_of(h); },
                                  options_.dp.norm_begin);
  std::vector<double> all(static_cast<size_t>(n), mine);
  if (n > 1) {
    grad_comm_->allgather(TensorView::flat(&mine, 1, DType::kF64),
                          TensorView::flat(all.data(), n, DType::kF64))->wait();
  }
  return norm_from_partials(all);
}

void ZeroEngine::optimizer_step(const OptimizerStep& s) {
  gather_->wait_all();  // the last gather has written the parameters about to change
  for (size_t i = 0; i < shard_.held().size(); ++i) {
    const HeldRange& r = shard_.held()[i];
    float* g = grad_of(r);
    clip_grad_norm(g, r.numel(), s.grad_norm, s.max_norm);
    adamw_.update_range(r.begin, r.end, param_of(r), g, shard_.range<float>(state::kAdamM, i),
                        shard_.range<float>(state::kAdamV, i), s.t, s.lr, options_.dp.adamw);
  }
  if (options_.stage < 3) launch_parameter_gathers();
}

void ZeroEngine::launch_parameter_gathers() {
  gather_->forget_all();
  // In the order the next forward reads them: the lowest offsets (the last bucket) first.
  for (size_t b = plan_.buckets().size(); b-- > 0;) gather_->launch(b);
}

std::vector<NamedState> ZeroEngine::states() {
  gather_->wait_all();
  const ParamLayout& layout = stack_.layout();
  const auto [a, b] = ShardPlan(layout, plan_.ranks(), {std::string(state::kParam)})
                          .flat_range(grid_.dp_rank());
  std::vector<NamedState> out;
  const std::string_view names[] = {state::kParam, state::kAdamM, state::kAdamV};
  staging_.resize(3);
  for (int i = 0; i < 3; ++i) {
    const std::string name(names[i]);
    if (names[i] == state::kParam && options_.stage < 3) {
      out.push_back({name, full_params_, 0});
      continue;
    }
    const size_t bytes = static_cast<size_t>(b - a) * sizeof(float);
    if (staging_[i].size() != bytes) {
      staging_[i] = Buffer(alloc_, bytes);  // once: the writer's range never changes
      staging_bytes_ += bytes;
    }
    float* stage = static_cast<float*>(staging_[i].data());
    redistribute(plan_, grid_.dp_group(), [&](size_t k) { return held(names[i], k); }, a, b, stage);
    out.push_back({name, stage, a});
  }
  return out;
}

}  // namespace etr
