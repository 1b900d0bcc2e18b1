#include "collectives/hierarchical.h"

#include <vector>

#include "collectives/reduce_kernels.h"
#include "collectives/ring_algorithms.h"
#include "collectives/ring_step.h"

namespace etr {

void hierarchical_allreduce(const AlgoParams& local, const AlgoParams& cross, const void* in,
                            void* out, int64_t count, ReduceOp op) {
  const int per_host = local.ctx.size(), hosts = cross.ctx.size();
  const size_t es = dtype_size(local.dtype);
  // Phase 1: segment l of out := segment l summed over this host (no divide yet).
  const std::vector<int64_t> seg = ring_segments(count, per_host, es);
  ring_reduce_scatter_segments(local, in, out, seg, op, 0);
  // Phase 2: the host ring on segment l, in place (offsets within the segment).
  const int l = local.ctx.rank();
  char* mine = static_cast<char*>(out) + seg[l] * es;
  const std::vector<int64_t> piece = ring_segments(seg[l + 1] - seg[l], hosts, es);
  ring_reduce_scatter_segments(cross, mine, mine, piece, op, per_host * hosts);
  ring_allgather_segments(cross, mine, piece);
  // Phase 3: every host's rank l hands segment l to the others.
  ring_allgather_segments(local, out, seg);
}

namespace {

// One step of the alternating ring: send block `send` (offsets [a, b) of out) to the
// next rank; receive the previous rank's block `recv` into out, reduced into this rank's
// copy when `reduce_it` (dividing by avg_divisor for an average), else in place.
struct Block {
  int64_t begin, end;
};

void alternating_step(const AlgoParams& p, char* out, Block send, Block recv, bool reduce_it,
                      ReduceOp op, int avg_divisor) {
  const int n = p.ctx.size(), i = p.ctx.rank();
  const size_t es = dtype_size(p.dtype);
  RingStep step;
  step.to = ring_mod(i + 1, n);
  step.from = ring_mod(i - 1, n);
  step.tag = kTagRing;
  step.send_data = out + send.begin * es;
  step.send_count = send.end - send.begin;
  step.recv_count = recv.end - recv.begin;
  step.elem_size = es;
  char* dst = out + recv.begin * es;
  if (!reduce_it) {
    step.recv_into = dst;
    step.chunk = std::max<int64_t>(1, std::max(step.send_count, step.recv_count));
    step.depth = 1;
    return run_ring_step(p.transport, p.ctx, step);
  }
  step.chunk = step_chunk(p, std::max(step.send_count, step.recv_count));
  step.depth = p.depth;
  step.slots = p.scratch.get(p.scratch.slots, static_cast<size_t>(step.chunk) * es * p.depth);
  const bool divide = op == ReduceOp::kAvg && avg_divisor > 0;
  step.consume = [&](int64_t o, const void* piece, int64_t c) {
    if (divide) {
      reduce_avg_last(p.dtype, dst + o * es, dst + o * es, piece, c, avg_divisor);
    } else {
      reduce(p.dtype, op, dst + o * es, dst + o * es, piece, c);
    }
  };
  run_ring_step(p.transport, p.ctx, step);
}

}  // namespace

void two_host_allreduce(const AlgoParams& local, const AlgoParams& alternating, int host,
                        const void* in, void* out, int64_t count, ReduceOp op) {
  const int per_host = local.ctx.size(), l = local.ctx.rank();
  const size_t es = dtype_size(local.dtype);
  // Blocks X_j = block j and Y_j = block L + j of 2L.
  const std::vector<int64_t> blocks = ring_segments(count, 2 * per_host, es);
  const std::vector<int64_t> x(blocks.begin(), blocks.begin() + per_host + 1);
  const std::vector<int64_t> y(blocks.begin() + per_host, blocks.end());
  auto X = [&](int j) { return Block{x[ring_mod(j, per_host)], x[ring_mod(j, per_host) + 1]}; };
  auto Y = [&](int j) { return Block{y[ring_mod(j, per_host)], y[ring_mod(j, per_host) + 1]}; };
  const bool a = host == 0;
  // Phase 1 (within the host): rank l of host A sums X_l and Y_{l-1}, of host B X_l, Y_l.
  ring_reduce_scatter_segments(local, in, out, x, op, 0);
  ring_reduce_scatter_segments(local, in, out, y, op, 0, a ? -1 : 0);
  // Phase 2 (across): ring A_0 -> B_0 -> A_1 -> B_1 -> ... The block a rank owns, c_i,
  // is Y_{l-1} on A_l and X_l on B_l; it first sends c_{i+1} (its host's sum), adds the
  // previous rank's sum of c_i, then sends c_i whole and receives c_{i-1} whole.
  char* o = static_cast<char*>(out);
  const int n = 2 * per_host;
  const Block own = a ? Y(l - 1) : X(l), next = a ? X(l) : Y(l), prev = a ? X(l - 1) : Y(l - 1);
  alternating_step(alternating, o, next, own, true, op, n);
  alternating_step(alternating, o, own, prev, false, op, 0);
  // Phase 3 (within the host): rank l of host A holds X_{l-1} and Y_{l-1}, of host B X_l
  // and Y_{l-1}; each hands them to the others.
  ring_allgather_segments(local, out, x, a ? -1 : 0);
  ring_allgather_segments(local, out, y, -1);
}

}  // namespace etr
