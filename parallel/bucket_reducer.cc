#include "parallel/bucket_reducer.h"

#include <algorithm>

#include "runtime/bytes.h"
#include "runtime/check.h"
#include "runtime/error.h"

namespace etr {

double ReduceStats::hidden_fraction() const {
  if (comm_seconds <= 0) return 1.0;
  return std::clamp(1.0 - exposed_seconds / comm_seconds, 0.0, 1.0);
}

ReduceStats& ReduceStats::operator+=(const ReduceStats& o) {
  comm_seconds += o.comm_seconds;
  exposed_seconds += o.exposed_seconds;
  buckets += o.buckets;
  bytes += o.bytes;
  return *this;
}

std::vector<Bucket> plan_buckets(const ParamLayout& layout, size_t element_bytes,
                                 const BucketOptions& options) {
  if (options.first_bucket_bytes == 0 || options.bucket_cap_bytes == 0) {
    throw InvalidArgument("gradient bucket sizes must be positive (first " +
                          std::to_string(options.first_bucket_bytes) + " bytes, cap " +
                          std::to_string(options.bucket_cap_bytes) + " bytes)");
  }
  if (options.shard_ranks < 1) {
    throw InvalidArgument("gradient buckets are cut for at least one rank (shard_ranks " +
                          std::to_string(options.shard_ranks) + ")");
  }
  // ZeRO's alignment: 16 elements (the ring's segment rounding) per rank.
  const int64_t align = options.shard_ranks > 1 ? 16 * int64_t{options.shard_ranks} : 1;
  auto elements = [&](size_t bytes) {
    const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(bytes / element_bytes));
    return (n + align - 1) / align * align;
  };
  const int layers = layout.num_layers();
  std::vector<Bucket> buckets;
  int64_t hi = layout.numel();
  while (hi > 0) {
    const int64_t size = elements(buckets.empty() ? options.first_bucket_bytes
                                                  : options.bucket_cap_bytes);
    // Aligned: the bucket reaching 0 keeps a multiple of `align`, the rest is the tail.
    int64_t lo = std::max<int64_t>(0, hi - size);
    if (lo == 0 && hi % align != 0 && hi > align) lo = hi % align;
    const bool replicated = align > 1 && (hi - lo) % align != 0;
    // The lowest layer whose tensors intersect [lo, hi); padding alone belongs to the
    // bucket above it (or to the last layer).
    int ready = buckets.empty() ? layers - 1 : buckets.back().ready_layer;
    for (int l = 0; l < layers; ++l) {
      auto [b, e] = layout.layer_range(l);
      if (b < hi && e > lo && b < e) {
        ready = l;
        break;
      }
    }
    buckets.push_back(Bucket{lo, hi, std::max(ready, 0), replicated});
    hi = lo;
  }
  return buckets;
}

BucketReducer::BucketReducer(const ParamLayout& layout, float* grads, Communicator& comm,
                             BucketOptions options, Tracer* tracer)
    : layout_(layout),
      grads_(grads),
      comm_(comm),
      options_(options),
      tracer_(tracer),
      buckets_(plan_buckets(layout, sizeof(float), options)) {
  work_.resize(buckets_.size());
  const bool scatter = options_.op == BucketOp::kReduceScatter;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const int64_t n = buckets_[i].end - buckets_[i].begin;
    if (scatter && !buckets_[i].replicated && n % comm_.size() != 0) {
      throw InvalidArgument("bucket " + std::to_string(i) + " holds " + std::to_string(n) +
                            " elements, not a multiple of the " + std::to_string(comm_.size()) +
                            " ranks its reduce-scatter splits it over");
    }
    const double bytes = static_cast<double>(n) * sizeof(float);
    std::string name = scatter && !buckets_[i].replicated ? "reduce-scatter" : "allreduce";
    name += " bucket " + std::to_string(i) + " (" + format_bytes(bytes) + ")";
    trace_names_.push_back(std::move(name));
  }
}

void BucketReducer::begin_step() {
  next_ = 0;
  reported_ = 0;
  armed_ = true;
  local_sq_ = 0;
  last_layer_ = layout_.num_layers();
  std::fill(work_.begin(), work_.end(), nullptr);
}

void BucketReducer::launch(size_t i) {
  const Bucket& b = buckets_[i];
  if (measure_local_) {
    double sq = 0;
    const float* g = grads_ + b.begin;
#pragma omp simd reduction(+ : sq)
    for (int64_t k = 0; k < b.end - b.begin; ++k) sq += static_cast<double>(g[k]) * g[k];
    local_sq_ += sq;
  }
  work_[i] = start(i);
}

WorkPtr BucketReducer::start(size_t i) {
  const Bucket& b = buckets_[i];
  if (before_launch_) before_launch_(i, b, grads_ + b.begin);
  // The gradients are where the communicator works (host memory, or its GPU's for NCCL).
  TensorView view = TensorView::flat(grads_ + b.begin, b.end - b.begin, DType::kF32, comm_.device());
  if (options_.op == BucketOp::kAllreduce || b.replicated) return comm_.allreduce(view, ReduceOp::kSum);
  const int64_t block = (b.end - b.begin) / comm_.size();
  float* out = scatter_out_ ? scatter_out_(i) : grads_ + b.begin + comm_.rank() * block;
  return comm_.reduce_scatter(view, TensorView::flat(out, block, DType::kF32, comm_.device()),
                              ReduceOp::kSum);
}

WorkPtr BucketReducer::reduce_apart(size_t bucket) { return start(bucket); }

void BucketReducer::ready_from(int64_t offset) {
  if (!armed_) return;
  while (next_ < buckets_.size() && buckets_[next_].begin >= offset) launch(next_++);
  poll_completed();
}

void BucketReducer::poll_completed() {
  while (on_reduced_ && reported_ < next_ && work_[reported_]->is_completed()) {
    work_[reported_]->wait();  // rethrows its error
    on_reduced_(reported_++);
  }
}

void BucketReducer::layer_ready(int layer) {
  if (!armed_) return;
  if (layer >= last_layer_ || layer < 0) {
    throw InvalidArgument("layer " + std::to_string(layer) +
                          " reported final gradients out of order (after layer " +
                          std::to_string(last_layer_) + "); layers report in decreasing order");
  }
  last_layer_ = layer;
  if (!options_.overlap) return;
  while (next_ < buckets_.size() && buckets_[next_].ready_layer >= layer) launch(next_++);
  poll_completed();
}

bool BucketReducer::wait_oldest() {
  if (!armed_ || !on_reduced_ || reported_ >= next_) return false;
  work_[reported_]->wait();  // rethrows its error
  on_reduced_(reported_++);
  return true;
}

ReduceStats BucketReducer::finish() {
  if (!armed_) begin_step();
  const auto t0 = Tracer::Clock::now();
  comm_.set_caller_waiting(true);  // backward is over: this core is the engine's now
  while (next_ < buckets_.size()) launch(next_++);
  ReduceStats s;
  std::exception_ptr first_error;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    try {
      work_[i]->wait();
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  comm_.set_caller_waiting(false);
  const auto t1 = Tracer::Clock::now();
  armed_ = false;
  if (first_error) std::rethrow_exception(first_error);
  poll_completed();
  s.exposed_seconds = std::chrono::duration<double>(t1 - t0).count();
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const WorkTiming t = work_[i]->timing();
    s.comm_seconds += t.seconds();
    s.bytes += static_cast<size_t>(buckets_[i].end - buckets_[i].begin) * sizeof(float);
    if (tracer_) {
      tracer_->complete(TraceTrack::kComm, trace_names_[i], "comm", t.started, t.finished,
                        "{\"bucket\": " + std::to_string(i) + ", \"bytes\": " +
                            std::to_string((buckets_[i].end - buckets_[i].begin) * sizeof(float)) +
                            ", \"ready_after_layer\": " +
                            std::to_string(buckets_[i].ready_layer) + "}");
    }
  }
  s.buckets = static_cast<int>(buckets_.size());
  if (tracer_) tracer_->complete(TraceTrack::kWait, "wait for gradients", "wait", t0, t1);
  return s;
}

void broadcast_parameters(Communicator& comm, float* params, int64_t count) {
  if (comm.size() == 1 || count == 0) return;
  comm.broadcast(TensorView::flat(params, count, DType::kF32), 0)->wait();
}

}  // namespace etr
