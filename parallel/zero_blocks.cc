// ZeroEngine's blocked gradients (zero_engine.h, "Blocked gradients"): the GradSink the
// layers hand their gradients to a block of rows at a time while each micro-batch is
// reduce-scattered into the shard.
//
// One tensor of `rows` x `cols` at element `off`, handed over from its last row down:
//
//   bucket k holds element off + hi cols - 1 (the top row's last)
//   block   = rows [lo, hi), lo = max(0, floor((k.begin - off) / cols)): the rows whose last
//             element lies in k (the lowest may reach into the bucket below)
//   hold    = wait for the oldest reductions while the window holds > one bucket, then
//             take the pages of the buckets the block touches
//   compute(lo, hi)
//   own     : everything from off + lo cols up is final: launch those buckets (ready_from)
//   shared  : each bucket of the tensor whose part is complete, and which holds nothing
//             of this micro-batch's own gradients (it ends below final_from_), is reduced
//             apart now, its window range zeroed and released; a bucket that does hold
//             some keeps the share for the step's reduction of it
#include <algorithm>

#include "parallel/zero_engine.h"
#include "runtime/state_names.h"

namespace etr {

size_t ZeroEngine::bucket_of(int64_t element) const {
  const std::vector<Bucket>& k = plan_.buckets();  // decreasing offsets
  auto it =
      std::partition_point(k.begin(), k.end(), [&](const Bucket& b) { return b.begin > element; });
  return static_cast<size_t>(it - k.begin());
}

void ZeroEngine::hold(int64_t begin, int64_t end) {
  while (grad_held_bytes_ > blocked_window_cap() && reducer_->wait_oldest()) {
  }
  for (size_t b = bucket_of(end - 1), last = bucket_of(begin); b <= last; ++b) acquire_bucket(b);
}

void ZeroEngine::rows(const void* grad, int64_t rows, int64_t cols, const Compute& compute) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t off = static_cast<const float*>(grad) - full_grads_;
  const auto [mine, mine_end] = stack_.layout().layer_range(current_layer_);
  const bool own = off >= mine && off < mine_end;
  const std::vector<Bucket>& buckets = plan_.buckets();
  size_t apart = bucket_of(off + rows * cols - 1);  // shared: the next bucket to reduce apart
  const size_t bottom = bucket_of(off);
  for (int64_t hi = rows; hi > 0;) {
    const Bucket& k = buckets[bucket_of(off + hi * cols - 1)];
    const int64_t lo = std::max<int64_t>(0, (k.begin - off) / cols);
    hold(off + lo * cols, off + hi * cols);
    compute(lo, hi);
    if (own) {
      final_from_ = std::min(final_from_, off + lo * cols);
      reducer_->ready_from(final_from_);
    } else {
      for (; apart <= bottom && (lo == 0 || buckets[apart].begin >= off + lo * cols); ++apart) {
        if (reducible_apart(apart)) reduce_apart(apart);
      }
    }
    hi = lo;
  }
}

// Waited for at once: the step's reduction of the same bucket later adds the shard's sum
// (which this one writes) to its contribution.
void ZeroEngine::reduce_apart(size_t b) {
  const Bucket& k = plan_.buckets()[b];
  apart_done_[b] = 1;
  reducer_->reduce_apart(b)->wait();
  const size_t bytes = static_cast<size_t>(k.numel()) * sizeof(float);
  if (k.replicated) ops_.copy(held(state::kGrad, b), full_grads_ + k.begin, bytes, stream_);
  ops_.zero(full_grads_ + k.begin, bytes, stream_);  // the collective's leftovers
  if (grad_held_[b]) {
    grad_window_->release(k.begin, k.end);
    grad_held_[b] = 0;
    grad_held_bytes_ -= bytes;
  }
}

void ZeroEngine::finish_shared(int layer) {
  for (const SharedParam& p : stack_.shared()) {
    if (p.user != layer) continue;
    const TensorEntry* e = stack_.layout().find(p.name);
    if (!e || e->numel() == 0) continue;
    for (size_t b = bucket_of(e->offset + e->numel() - 1), last = bucket_of(e->offset); b <= last;
         ++b) {
      if (reducible_apart(b)) reduce_apart(b);
    }
  }
}

// An upper bound: a block is the rows whose last element lies in one bucket, so it reaches
// at most a row below that bucket; a row is a 2-D tensor's, or a span of adjacent 1-D
// tensors of one layer written together (a LayerNorm's weight and bias).
size_t ZeroEngine::largest_block_bytes() const {
  const std::span<const TensorEntry> e = stack_.layout().entries();
  int64_t row = 1;
  for (size_t i = 0; i < e.size(); ++i) {
    if (e[i].shape.ndim() >= 2)
      row = std::max(row, e[i].numel() / std::max<int64_t>(1, e[i].shape[0]));
    if (e[i].shape.ndim() == 1 && i + 1 < e.size() && e[i + 1].shape.ndim() == 1 &&
        e[i + 1].layer == e[i].layer) {
      row = std::max(row, e[i + 1].offset + e[i + 1].numel() - e[i].offset);
    }
  }
  const std::vector<Bucket>& buckets = plan_.buckets();
  int64_t most = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    int64_t n = 0;
    for (size_t c = b, last = bucket_of(std::max<int64_t>(0, buckets[b].begin - (row - 1)));
         c <= last; ++c) {
      n += buckets[c].numel();
    }
    most = std::max(most, n);
  }
  return static_cast<size_t>(most) * sizeof(float);
}

}  // namespace etr
