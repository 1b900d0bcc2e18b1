// BucketReducer: data-parallel gradient averaging in buckets, overlapped with backward
// (docs/design.md, "Core data layout" and "Execution of one optimizer step", step 2).
//
// The flat gradient buffer [0, numel) is cut into buckets from its END backwards, since
// backward finishes the layers in reverse order:
//
//   bucket 0 = [numel - first_bucket, numel)        small, so communication starts early
//   bucket k = [lo_k, hi_k), hi_k = lo_{k-1},  hi_k - lo_k = cap (the last one: the rest)
//
// Bucket edges are element offsets, not layer edges: a bucket may split a layer. A
// bucket is ready when every layer it touches has final gradients, i.e. when the
// LOWEST layer it touches has reported (layers report in decreasing order). Protocol of
// one optimizer step (every rank, same order):
//
//   begin_step()                  arms the reducer (on the last micro-batch only)
//   layer_ready(L), L = n-1..0    after layer L's backward; launches, in bucket order,
//                                 every bucket that became ready (overlap on), else
//                                 nothing (overlap off: "reduce after backward")
//   finish()                      launches what is left, waits for every bucket
//
// Buckets are launched strictly in index order, so the collectives match on every rank
// whatever the timing. Each is an in-place allreduce(sum) on the communicator's progress
// thread while the caller goes on with backward; the gradients must already be scaled by
// 1 / (tokens in the global batch) so that the sum is the global mean, which keeps
// uneven per-rank batches exact.
//
// Measured per step (ReduceStats): `comm` = time the progress engine spent running the
// buckets (start of execution to completion; they run one after another), `exposed` =
// time finish() blocked the caller, hidden fraction = 1 - exposed / comm.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/param_layout.h"
#include "runtime/trace.h"

namespace etr {

// What a bucket's collective is: a sum into every rank's whole bucket (data parallel), or
// a sum of which rank r keeps block r of n equal blocks (ZeRO-2/3: the bucket's length
// must then be a multiple of n).
enum class BucketOp { kAllreduce, kReduceScatter };

struct BucketOptions {
  size_t first_bucket_bytes = 256 << 10;  // see docs/architecture.md for the measurement
  size_t bucket_cap_bytes = 1 << 20;
  bool overlap = true;  // false: every bucket is launched by finish(), after backward
  BucketOp op = BucketOp::kAllreduce;
  // Ranks the buckets are cut for (> 1: ZeRO's alignment, see plan_buckets).
  int shard_ranks = 1;
};

struct Bucket {
  int64_t begin = 0;  // [begin, end) elements of the flat buffer
  int64_t end = 0;
  int ready_layer = 0;  // the lowest layer it touches: ready once that layer reported
  // Too small to split over the ranks: always allreduced, and every rank keeps all of it
  // (the tail [0, x) of an aligned plan, x < 16 shard_ranks).
  bool replicated = false;
  int64_t numel() const { return end - begin; }
};

struct ReduceStats {
  double comm_seconds = 0;     // the engine running the step's buckets
  double exposed_seconds = 0;  // the caller blocked in finish()
  int buckets = 0;
  size_t bytes = 0;
  // 1 - exposed / comm, in [0, 1] (1 when nothing was communicated).
  double hidden_fraction() const;
  // Sums over steps (the hidden fraction of a sum weighs each step by its comm time).
  ReduceStats& operator+=(const ReduceStats& o);
};

// The buckets for a buffer of `layout` with elements of `element_bytes`. InvalidArgument
// when a size is 0.
//
// With options.shard_ranks = n > 1 every bucket holds a multiple of A = 16 n elements
// (the sizes are rounded up to one), except a tail [0, x), x < A, marked replicated. A
// ring allreduce of such a bucket sums segment r exactly as a reduce-scatter sums block
// r (both are [len r / n, len (r+1) / n): collectives/ring_common.h rounds segments to 16
// elements), so data parallelism and every ZeRO stage add the same numbers in the same
// order (parallel/zero_plan.h).
std::vector<Bucket> plan_buckets(const ParamLayout& layout, size_t element_bytes,
                                 const BucketOptions& options);

class BucketReducer {
 public:
  // Reduces `grads` (float, layout.numel() elements) over `comm`. `tracer` may be null.
  BucketReducer(const ParamLayout& layout, float* grads, Communicator& comm,
                BucketOptions options, Tracer* tracer = nullptr);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const BucketOptions& options() const { return options_; }

  // Called with each bucket's index and its elements just before it is launched, on the
  // caller's thread, every rank in the same order (e.g. to read this rank's local gradient
  // norm for a gradient-noise measurement before the sum replaces it).
  using LaunchHook = std::function<void(size_t bucket, const Bucket& range, const float* local)>;
  void set_before_launch(LaunchHook hook) { before_launch_ = std::move(hook); }
  // kReduceScatter: where this rank's block of bucket b goes (block r of the bucket in
  // place when not set). Replicated buckets are allreduced in place whatever the op.
  void set_scatter_output(std::function<float*(size_t bucket)> out) { scatter_out_ = std::move(out); }
  // Called on the caller's thread once bucket b's collective has completed (seen by
  // layer_ready(), which polls, or by finish()), each bucket once per step, in order.
  void set_on_reduced(std::function<void(size_t bucket)> f) { on_reduced_ = std::move(f); }

  void begin_step();
  // With `on`, each bucket's squared L2 norm is summed before its collective: this rank's
  // own gradient before the reduction (the gradient noise scale's small batch,
  // parallel/goodput.h). local_sq_norm() is the step's sum (reset by begin_step()).
  void measure_local_norm(bool on) { measure_local_ = on; }
  double local_sq_norm() const { return local_sq_; }
  // Between begin_step() and finish().
  bool armed() const { return armed_; }
  // Layer `layer`'s gradients are final. Layers must report in decreasing order between
  // begin_step() and finish(); InvalidArgument otherwise.
  void layer_ready(int layer);
  // Every element at offset `offset` and above is final (blocked gradients: a layer hands
  // its gradients over in decreasing offset order, runtime/grad_sink.h): launches, in
  // order, every bucket that starts there or above, overlap on or off, and reports those
  // done.
  void ready_from(int64_t offset);
  // Bucket b's collective now, outside the step's order (the before_launch hook and the
  // scatter output as for launch): a shared tensor's share reduced apart from the step's
  // buckets (ZeRO's blocked gradients: the LM head's part of the tied wte). Every rank
  // calls it at the same point; the caller waits for it.
  WorkPtr reduce_apart(size_t bucket);
  // Waits for the oldest bucket launched and not yet reported, and reports it (on_reduced):
  // a bound on the memory of buckets in flight (ZeRO-2/3's gradient window). False when
  // none is in flight.
  bool wait_oldest();
  // Launches the buckets not launched yet and waits for all of them; rethrows a
  // communication error (CommError). Without begin_step() it reduces the whole buffer.
  ReduceStats finish();

 private:
  void launch(size_t index);
  WorkPtr start(size_t index);  // the before_launch hook, then bucket `index`'s collective
  void poll_completed();  // runs on_reduced for the buckets done, in order

  const ParamLayout& layout_;
  float* grads_;
  Communicator& comm_;
  BucketOptions options_;
  Tracer* tracer_;
  std::vector<Bucket> buckets_;
  std::vector<std::string> trace_names_;  // "allreduce bucket 3 (1.0 MiB)"
  std::vector<WorkPtr> work_;             // per bucket, this step
  size_t next_ = 0;                       // first bucket not launched yet
  int last_layer_ = 0;                    // the last layer reported (decreasing)
  bool armed_ = false;
  bool measure_local_ = false;
  double local_sq_ = 0;
  LaunchHook before_launch_;
  std::function<float*(size_t)> scatter_out_;
  std::function<void(size_t)> on_reduced_;
  size_t reported_ = 0;  // buckets whose on_reduced ran this step
};

// Makes every rank's `count` parameters equal to rank 0's (broadcast), so replicas start
// equal whatever their initialisation.
void broadcast_parameters(Communicator& comm, float* params, int64_t count);

}  // namespace etr
