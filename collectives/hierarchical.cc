#include "collectives/hierarchical.h"

#include <algorithm>
#include <vector>

#include "collectives/reduce_kernels.h"
#include "collectives/ring_algorithms.h"
#include "collectives/ring_step.h"
#include "runtime/check.h"

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

// Elements [begin, end) of the buffer.
struct Block {
  int64_t begin, end;
};

// One step of the alternating ring: send block `send` of out to the next rank and
// receive the previous rank's block `recv` into out, either added to this rank's copy
// (`reduce_it`; an average divides by avg_divisor) or in place. `chunk` must be the same
// on every rank: both ends of a message cut it into pieces of that size.
void alternating_step(const AlgoParams& p, char* out, Block send, Block recv, int64_t chunk,
                      bool reduce_it, ReduceOp op, int avg_divisor) {
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
  step.chunk = chunk;
  char* dst = out + recv.begin * es;
  if (!reduce_it) {
    step.recv_into = dst;
    step.depth = 1;
    return run_ring_step(p.transport, p.ctx, step);
  }
  step.depth = p.depth;
  step.slots = p.scratch.get(p.scratch.slots, static_cast<size_t>(chunk) * es * p.depth);
  step.consume = [&](int64_t o, const void* piece, int64_t c) {
    reduce_hop(p.dtype, op, dst + o * es, dst + o * es, piece, c, avg_divisor);
  };
  run_ring_step(p.transport, p.ctx, step);
}

}  // namespace

void two_host_allreduce(const AlgoParams& local, const AlgoParams& alternating, int host,
                        const void* in, void* out, int64_t count, ReduceOp op) {
  const int per_host = local.ctx.size(), l = local.ctx.rank();
  const int ranks = alternating.ctx.size();
  ETR_CHECK(ranks == 2 * per_host && (host == 0 || host == 1))
      << "two_host_allreduce: the alternating ring holds 2 hosts of the local group's size";
  const size_t es = dtype_size(local.dtype);
  // Blocks x_j = block j and y_j = block L + j of 2L.
  const std::vector<int64_t> blocks = ring_segments(count, ranks, es);
  const std::vector<int64_t> x(blocks.begin(), blocks.begin() + per_host + 1);
  const std::vector<int64_t> y(blocks.begin() + per_host, blocks.end());
  auto x_block = [&](int j) { const int k = ring_mod(j, per_host); return Block{x[k], x[k + 1]}; };
  auto y_block = [&](int j) { const int k = ring_mod(j, per_host); return Block{y[k], y[k + 1]}; };
  const bool host_a = host == 0;
  // Phase 1 (within the host): rank l of host A sums x_l and y_{l-1}, of host B x_l, y_l.
  ring_reduce_scatter_segments(local, in, out, x, op, 0);
  ring_reduce_scatter_segments(local, in, out, y, op, 0, host_a ? -1 : 0);
  // Phase 2 (across): ring A_0 -> B_0 -> A_1 -> B_1 -> ... The block a rank owns, c_i,
  // is y_{l-1} on A_l and x_l on B_l; it first sends c_{i+1} (its host's sum), adds the
  // previous rank's sum of c_i, then sends c_i whole and receives c_{i-1} whole.
  int64_t largest = 0;
  for (int b = 0; b < ranks; ++b) largest = std::max(largest, blocks[b + 1] - blocks[b]);
  const int64_t pieces = step_chunk(alternating, largest);  // the same on every rank
  const int64_t whole = std::max<int64_t>(1, largest);       // one message per block
  char* buf = static_cast<char*>(out);
  const Block own = host_a ? y_block(l - 1) : x_block(l);
  const Block next = host_a ? x_block(l) : y_block(l);
  const Block prev = host_a ? x_block(l - 1) : y_block(l - 1);
  alternating_step(alternating, buf, next, own, pieces, true, op, ranks);
  alternating_step(alternating, buf, own, prev, whole, false, op, 0);
  // Phase 3 (within the host): rank l of host A holds x_{l-1} and y_{l-1}, of host B x_l
  // and y_{l-1}; each hands them to the others.
  ring_allgather_segments(local, out, x, host_a ? -1 : 0);
  ring_allgather_segments(local, out, y, -1);
}

}  // namespace etr
