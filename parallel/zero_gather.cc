#include "parallel/zero_gather.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <cstring>

#include "runtime/error.h"
#include "runtime/mpi_check.h"
#include "runtime/mpi_wait.h"
#include "runtime/control_ops.h"

namespace etr {

ParamGather::ParamGather(const ZeroPlan& plan, Communicator& comm, float* full,
                         std::function<const float*(size_t)> shard, void* stream)
    : plan_(plan), comm_(comm), full_(full), shard_(std::move(shard)), stream_(stream) {
  work_.resize(plan.buckets().size());
  state_.assign(plan.buckets().size(), kNone);
}

void ParamGather::launch(size_t b) {
  if (state_[b] != kNone) return;
  const Bucket& k = plan_.buckets()[b];
  ++gathers_;
  bytes_ += k.numel() * static_cast<int64_t>(sizeof(float));
  if (k.replicated) {
    const float* own = shard_(b);
    // (on the communicator's device: a copy enqueued on the rank's stream)
    device_ops(comm_.device()).copy(full_ + k.begin, own, k.numel() * sizeof(float), stream_);
    state_[b] = kReady;
    return;
  }
  const HeldRange mine = plan_.block(b, comm_.rank());
  TensorView in = TensorView::flat(const_cast<float*>(shard_(b)), mine.numel(), DType::kF32, comm_.device());
  TensorView out = TensorView::flat(full_ + k.begin, k.numel(), DType::kF32, comm_.device());
  work_[b] = comm_.allgather(in, out);
  state_[b] = kInFlight;
}

void ParamGather::wait(size_t b) {
  if (state_[b] != kInFlight) return;
  state_[b] = kReady;
  WorkPtr w = std::move(work_[b]);
  w->wait();
}

void ParamGather::wait_all() {
  std::exception_ptr first;
  for (size_t b = 0; b < state_.size(); ++b) {
    try {
      wait(b);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void ParamGather::forget(size_t b) {
  wait(b);
  state_[b] = kNone;
}

void ParamGather::forget_all() {
  wait_all();
  std::fill(state_.begin(), state_.end(), kNone);
}

std::vector<std::vector<size_t>> buckets_read_by_layers(const ZeroPlan& plan,
                                                        const LayerStack<float>& stack) {
  const ParamLayout& layout = stack.layout();
  std::vector<std::vector<size_t>> needed(static_cast<size_t>(stack.size()));
  for (int l = 0; l < stack.size(); ++l) {
    const auto [b, e] = layout.layer_range(l);
    needed[l] = plan.buckets_touching(b, e);
  }
  for (const SharedParam& s : stack.shared()) {
    const TensorEntry* t = layout.find(s.name);
    for (size_t b : plan.buckets_touching(t->offset, t->offset + t->numel())) {
      std::vector<size_t>& n = needed.at(s.user);
      if (std::find(n.begin(), n.end(), b) == n.end()) n.push_back(b);
    }
  }
  return needed;
}

LayerGatherer::LayerGatherer(const ZeroPlan& plan, const LayerStack<float>& stack,
                             MemoryWindow& window, ParamGather& gather, Logger* log,
                             size_t prefetch_bytes)
    : plan_(plan),
      window_(window),
      gather_(gather),
      log_(log),
      needed_(buckets_read_by_layers(plan, stack)) {
  by_prefetch_.assign(plan.buckets().size(), 0);
  // The lowest offsets first: the order a layer's tensors are laid out in.
  for (const std::vector<size_t>& n : needed_) {
    std::vector<size_t> sorted(n), p;  // bucket indices: higher index, lower offset
    std::sort(sorted.begin(), sorted.end(), std::greater<size_t>());
    size_t bytes = 0;
    for (size_t b : sorted) {
      const size_t size = static_cast<size_t>(plan.buckets()[b].numel()) * sizeof(float);
      if (prefetch_bytes == 0 || (!p.empty() && bytes + size > prefetch_bytes)) break;
      p.push_back(b);
      bytes += size;
    }
    prefetch_.push_back(std::move(p));
  }
}

void LayerGatherer::acquire_and_launch(size_t b) {
  if (gather_.live(b)) return;
  const Bucket& k = plan_.buckets()[b];
  window_.acquire(k.begin, k.end);
  gather_.launch(b);
}

void LayerGatherer::release(size_t b) {
  by_prefetch_[b] = 0;
  if (!gather_.live(b)) return;
  gather_.forget(b);  // waits: the pages must not be written once returned
  const Bucket& k = plan_.buckets()[b];
  window_.release(k.begin, k.end);
}

void LayerGatherer::before(bool backward, int layer) {
  const int event = 2 * layer + (backward ? 1 : 0);
  const size_t k = current_.size();
  current_.push_back(event);
  if (!recording_ && (k >= recorded_.size() || recorded_[k] != event)) {
    recording_ = true;
    ++reorders_;
    if (log_) {
      log_->warn("ZeRO-3: the layers ran in another order than the recorded one (", backward ? "backward" : "forward",
                 " of layer ", layer, " at call ", k, "); recording the new order, no prefetch until then");
    }
  }
  static const std::vector<size_t> kNone;
  const std::vector<size_t>& next =
      !recording_ && k + 1 < recorded_.size() ? prefetch_.at(recorded_[k + 1] / 2) : kNone;
  const std::vector<size_t>& now = needed_.at(layer);
  auto wanted = [&](size_t b) {
    return std::find(now.begin(), now.end(), b) != now.end() ||
           std::find(next.begin(), next.end(), b) != next.end();
  };
  bool prefetched = false;
  for (size_t b : now) prefetched = prefetched || (by_prefetch_[b] && gather_.live(b));
  if (prefetched) ++prefetched_passes_;
  for (size_t b = 0; b < plan_.buckets().size(); ++b) {
    if (gather_.live(b) && !wanted(b)) release(b);
  }
  for (size_t b : now) {
    acquire_and_launch(b);
    by_prefetch_[b] = 0;
  }
  for (size_t b : now) gather_.wait(b);
  for (size_t b : next) {
    if (gather_.live(b)) continue;
    acquire_and_launch(b);
    by_prefetch_[b] = 1;  // launched now, read by the next pass
  }
}

void LayerGatherer::end_step() {
  release_all();
  if (recording_ && !current_.empty()) {
    recorded_ = std::move(current_);
    recording_ = false;
  }
  current_.clear();
}

void LayerGatherer::gather_all() {
  launch_all();
  gather_.wait_all();
}

void LayerGatherer::launch_all() {
  for (size_t b = plan_.buckets().size(); b-- > 0;) acquire_and_launch(b);
}

void LayerGatherer::release_all() {
  for (size_t b = 0; b < plan_.buckets().size(); ++b) release(b);
}

}  // namespace etr
