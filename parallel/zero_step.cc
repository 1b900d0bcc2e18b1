// ZeroEngine: one optimizer step and the states a checkpoint saves (zero_engine.h).
#include <algorithm>
#include <cstring>

#include <unistd.h>

#include "checkpoint/shard_plan.h"
#include "parallel/zero_engine.h"
#include "runtime/adamw.h"
#include "runtime/state_names.h"

namespace etr {

void ZeroEngine::begin_step() {
  if (layers_) layers_->release_all();  // parameters materialized since the last step
  finish_begin_step();
}

// (each part may be made again: the gathers already launched are not launched again)
void ZeroEngine::finish_begin_step() {
  add_optimizer_states();  // stage 3 without initialize_parameters()
  if (grad_window_) {
    grad_window_->drop_all();
    std::fill(grad_held_.begin(), grad_held_.end(), 0);
    grad_held_bytes_ = 0;
    // Reducing each micro-batch, the shard accumulates from zero.
    if (each_) ops_.zero(shard_.data<float>(state::kGrad), static_cast<size_t>(shard_.held_numel()) * sizeof(float), stream_);
  } else {
    ops_.zero(full_grads_, static_cast<size_t>(stack_.layout().numel()) * sizeof(float), stream_);
  }
  if (layers_ && options_.gather_once_per_step) layers_->launch_all();
}

void ZeroEngine::begin_backward(bool last) {
  if (!each_) {
    if (last) reducer_->begin_step();
    return;
  }
  // Every micro-batch communicates: the previous one's buckets are waited for (their pages
  // released) before this one's backward writes the window again.
  if (reducer_->armed()) earlier_ += reducer_->finish();
  reducer_->begin_step();
  final_from_ = stack_.layout().numel();
  apart_done_.assign(plan_.buckets().size(), 0);
}

void ZeroEngine::set_reduce_each_micro_batch(bool on) {
  each_ = on && options_.stage >= 2 && !device_path_;
  blocked_ = blocks_gradients_if(each_);
  stack_.set_grad_sink(blocked_ ? static_cast<GradSink*>(this) : nullptr);
  // Blocked, the window holds a bucket and a block: counted in system pages, not 2 MiB
  // ones (first touch is slower: fit first, then speed). Between steps: nothing is held.
  if (auto* w = dynamic_cast<HostWindow*>(grad_window_.get())) {
    w->set_page_bytes(blocked_ ? static_cast<size_t>(sysconf(_SC_PAGESIZE)) : grad_page_);
    std::fill(grad_held_.begin(), grad_held_.end(), 0);
    grad_held_bytes_ = 0;
  }
  if (!each_) {
    reducer_->set_before_launch(nullptr);
    return;
  }
  const int r = grid_.dp_rank();
  reducer_->set_before_launch([this, r](size_t b, const Bucket& k, const float* local) {
    if (blocked_) acquire_bucket(b);  // a bucket no block wrote (padding) is read all the same
    // This rank's contribution to its own block (the replicated tail: rank 0's to all of
    // it) takes the shard's sum so far, so the collective's result is the running sum.
    float* g = const_cast<float*>(local);
    const float* sum = held(state::kGrad, b);
    int64_t at = 0, n = k.numel();
    if (!k.replicated) {
      const HeldRange mine = plan_.block(b, r);
      at = mine.begin - k.begin;
      n = mine.numel();
    } else if (r != 0) {
      return;
    }
    for (int64_t i = 0; i < n; ++i) g[at + i] += sum[i];
  });
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
  current_layer_ = layer;
  if (!grad_window_ || blocked_) return;  // blocked: each block takes its own pages
  for (size_t b : needed_.at(layer)) acquire_bucket(b);
}

void ZeroEngine::acquire_bucket(size_t b) {
  if (grad_held_[b]) return;
  const Bucket& k = plan_.buckets()[b];
  grad_window_->acquire(k.begin, k.end);
  grad_held_[b] = 1;
  grad_held_bytes_ += static_cast<size_t>(k.numel()) * sizeof(float);
}

// The gradient window stays within grad_window_cap() once a layer is done: when the
// reductions fall behind backward, backward waits for the oldest (as FSDP's rate limiter
// does for its gathers), so the window's memory does not depend on the network's speed.
void ZeroEngine::layer_grads_final(int layer) {
  if (!reducer_->armed()) return;
  if (blocked_) finish_shared(layer);  // before the layer's own buckets, as its blocks go
  reducer_->layer_ready(layer);
  const size_t cap = blocked_ ? blocked_window_cap() : grad_window_cap();
  while (grad_window_ && grad_held_bytes_ > cap && reducer_->wait_oldest()) {
  }
}

size_t ZeroEngine::grad_window_cap() const {
  return largest_layer_bytes() + 2 * options_.dp.buckets.bucket_cap_bytes;
}

void ZeroEngine::reduced(size_t b) {
  if (!grad_window_) return;
  const Bucket& k = plan_.buckets()[b];
  // A replicated bucket was allreduced in place: every rank keeps all of it.
  if (k.replicated) ops_.copy(held(state::kGrad, b), full_grads_ + k.begin, k.numel() * sizeof(float), stream_);
  if (grad_held_[b]) {
    grad_window_->release(k.begin, k.end);
    grad_held_[b] = 0;
    grad_held_bytes_ -= static_cast<size_t>(k.numel()) * sizeof(float);
  }
}

ReduceStats ZeroEngine::end_backward() {
  ReduceStats s = reducer_->finish();
  s += earlier_;
  earlier_ = {};
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

// This rank's partial: the squares of each norm range summed where the gradients are
// (DeviceOps::sum_squares: on the host ZeroPlan::partial_norm's blocks and order), added in
// range order on the host; the partials all-gathered and added in rank order.
double ZeroEngine::grad_norm() {
  const int n = plan_.ranks();
  const std::vector<HeldRange> ranges = plan_.norm_ranges(grid_.dp_rank());
  double* dev = static_cast<double*>(norm_slots_.data());
  const int64_t from = options_.dp.norm_begin;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const int64_t skip = std::clamp<int64_t>(from - ranges[i].begin, 0, ranges[i].numel());
    ops_.sum_squares(dev + i, grad_of(ranges[i]) + skip, ranges[i].numel() - skip, stream_);
  }
  ops_.download(norm_host_.data(), dev, ranges.size() * sizeof(double), stream_);
  ops_.synchronize(stream_);
  double mine = 0;
  for (size_t i = 0; i < ranges.size(); ++i) mine += norm_host_.as<double>()[i];
  std::vector<double> all(static_cast<size_t>(n), mine);
  if (n > 1) {
    grad_comm_->allgather(TensorView::flat(&mine, 1, DType::kF64),
                          TensorView::flat(all.data(), n, DType::kF64))->wait();
  }
  return norm_from_partials(all);
}

// Clipping by the norm (etr::clip_grad_norm's rule and product) and AdamW over each held
// range, enqueued where the state is.
void ZeroEngine::optimizer_step(const OptimizerStep& s) {
  gather_->wait_all();  // the last gather has written the parameters about to change
  const bool clip = s.max_norm > 0 && !(s.grad_norm <= s.max_norm);
  const float factor = static_cast<float>(s.max_norm / (s.grad_norm + 1e-6));
  const ParamLayout& layout = stack_.layout();
  for (size_t i = 0; i < shard_.held().size(); ++i) {
    const HeldRange& r = shard_.held()[i];
    float* g = grad_of(r);
    if (clip) ops_.scale(g, r.numel(), factor, stream_);
    ops_.adamw_range(layout, r.begin, r.end, param_of(r), g, shard_.range<float>(state::kAdamM, i),
                     shard_.range<float>(state::kAdamV, i), s.t, s.lr, options_.dp.adamw, stream_);
  }
  if (options_.stage < 3) launch_parameter_gathers();
}

void ZeroEngine::launch_parameter_gathers() {
  gather_->forget_all();
  // In the order the next forward reads them: the lowest offsets (the last bucket) first.
  for (size_t b = plan_.buckets().size(); b-- > 0;) gather_->launch(b);
}

// Each rank saves what it owns (plan_.norm_ranges: its block of every bucket, and the
// replicated tail on rank 0) straight from its shards: no exchange between the ranks, and
// at stages 1-2 no wait for the parameters' gathers, since its own blocks of the
// parameters were written by the optimizer step before the gathers began (and a gather
// writes only the other ranks' blocks).
std::shared_ptr<const ShardOwners> ZeroEngine::checkpoint_owners() {
  if (!owners_) {
    auto owners = std::make_shared<ShardOwners>();
    for (int q = 0; q < plan_.ranks(); ++q) {
      auto& mine = owners->emplace_back();
      for (const HeldRange& h : plan_.norm_ranges(q)) mine.push_back({h.begin, h.end});
    }
    owners_ = std::move(owners);
  }
  return owners_;
}

std::vector<NamedState> ZeroEngine::states() {
  checkpoint_owners();
  if (device_path_) {
    gather_->wait_all();
    for (std::string_view n : {state::kParam, state::kAdamM, state::kAdamV}) download_mirror(n);
  }
  std::vector<NamedState> out;
  for (std::string_view n : {state::kParam, state::kAdamM, state::kAdamV}) {
    NamedState s{std::string(n)};
    s.owners = owners_;
    if (n == state::kParam && options_.stage < 3) {
      s.data = device_path_ ? mirror_replica().data<float>(state::kParam) : full_params_;
    } else {
      for (size_t b = 0; b < plan_.buckets().size(); ++b) {
        const HeldRange h = plan_.block(b, grid_.dp_rank());
        s.pieces.push_back({h.begin, h.end, host_held(n, b)});
      }
      std::sort(s.pieces.begin(), s.pieces.end(),
                [](const StatePiece& x, const StatePiece& y) { return x.begin < y.begin; });
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace etr
