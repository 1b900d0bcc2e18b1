#include "collectives/ring_algorithms.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "collectives/reduce_kernels.h"
#include "collectives/ring_step.h"

namespace etr {
namespace {

using SegmentDst = std::function<char*(int step, int segment)>;

// After this, rank r holds segment r + shift (mod n) fully reduced at dst(n - 2, that
// segment); an average is divided by avg_divisor on that last hop (0: not at all).
void reduce_scatter_phase(const AlgoParams& p, const char* in, const std::vector<int64_t>& off,
                          ReduceOp op, int avg_divisor, const SegmentDst& dst, int shift = 0) {
  const int n = p.ctx.size(), r = p.ctx.rank(), v = r + shift;  // v: segment numbering
  const size_t es = dtype_size(p.dtype);
  int64_t max_segment = 0;
  for (int i = 0; i < n; ++i) max_segment = std::max(max_segment, off[i + 1] - off[i]);
  const int64_t chunk = step_chunk(p, max_segment);  // the same on every rank
  void* slots = p.scratch.get(p.scratch.slots, static_cast<size_t>(chunk) * es * p.depth);
  for (int s = 0; s <= n - 2; ++s) {
    const int send_seg = ring_mod(v - 1 - s, n);
    const int recv_seg = ring_mod(v - 2 - s, n);
    const int divisor = s == n - 2 ? avg_divisor : 0;  // an average divides on the last hop
    char* recv_dst = dst(s, recv_seg);
    const char* recv_in = in + off[recv_seg] * es;
    RingStep step;
    step.to = ring_mod(r + 1, n);
    step.from = ring_mod(r - 1, n);
    step.tag = kTagRing;
    step.send_data = s == 0 ? in + off[send_seg] * es : dst(s - 1, send_seg);
    step.send_count = off[send_seg + 1] - off[send_seg];
    step.recv_count = off[recv_seg + 1] - off[recv_seg];
    step.elem_size = es;
    step.chunk = chunk;
    step.depth = p.depth;
    step.slots = slots;
    step.consume = [&](int64_t o, const void* piece, int64_t c) {
      reduce_hop(p.dtype, op, recv_dst + o * es, recv_in + o * es, piece, c, divisor);
    };
    run_ring_step(p.transport, p.ctx, step);
  }
}

// Before this, rank r holds segment r + shift (mod n) at out (or at `own` for the first
// send; `meanwhile` then copies it into place while the first step is on the wire).
// Nothing is reduced here, so each step moves its segment as one message: pieces would
// only add per-message costs (at np=2 allgather reached only 0.58-0.87x MPI's busbw
// with 256 KiB pieces).
void allgather_phase(const AlgoParams& p, char* out, const std::vector<int64_t>& off,
                     const char* own, const std::function<void()>& meanwhile, int shift = 0) {
  const int n = p.ctx.size(), r = p.ctx.rank(), v = r + shift;  // v: segment numbering
  const size_t es = dtype_size(p.dtype);
  for (int s = 0; s <= n - 2; ++s) {
    const int send_seg = ring_mod(v - s, n);
    const int recv_seg = ring_mod(v - s - 1, n);
    RingStep step;
    step.to = ring_mod(r + 1, n);
    step.from = ring_mod(r - 1, n);
    step.tag = kTagRing;
    step.send_data = (s == 0 && own) ? own : out + off[send_seg] * es;
    step.send_count = off[send_seg + 1] - off[send_seg];
    step.recv_into = out + off[recv_seg] * es;
    step.recv_count = off[recv_seg + 1] - off[recv_seg];
    step.elem_size = es;
    step.chunk = std::max<int64_t>(1, std::max(step.send_count, step.recv_count));
    step.depth = 1;
    if (s == 0) step.meanwhile = meanwhile;
    run_ring_step(p.transport, p.ctx, step);
  }
}

std::vector<int64_t> equal_blocks(int64_t block, int n) {
  std::vector<int64_t> off(n + 1);
  for (int i = 0; i <= n; ++i) off[i] = block * i;
  return off;
}

}  // namespace

void ring_reduce_scatter_segments(const AlgoParams& p, const void* in, void* out,
                                  const std::vector<int64_t>& off, ReduceOp op, int avg_divisor,
                                  int shift) {
  const int n = p.ctx.size();
  const size_t es = dtype_size(p.dtype);
  char* o = static_cast<char*>(out);
  const char* i = static_cast<const char*>(in);
  if (n == 1) {
    const int64_t count = off[1] - off[0];
    if (count == 0) return;
    if (in != out) std::memmove(o + off[0] * es, i + off[0] * es, count * es);
    if (op == ReduceOp::kAvg && avg_divisor > 1) divide(p.dtype, o + off[0] * es, count, avg_divisor);
    return;
  }
  reduce_scatter_phase(
      p, i, off, op, avg_divisor, [&](int, int seg) { return o + off[seg] * es; }, shift);
}

void ring_allgather_segments(const AlgoParams& p, void* out, const std::vector<int64_t>& off,
                             int shift) {
  allgather_phase(p, static_cast<char*>(out), off, nullptr, nullptr, shift);
}

void ring_allreduce(const AlgoParams& p, const void* in, void* out, int64_t count, ReduceOp op) {
  const int n = p.ctx.size();
  const std::vector<int64_t> off = ring_segments(count, n, dtype_size(p.dtype));
  ring_reduce_scatter_segments(p, in, out, off, op, n);
  ring_allgather_segments(p, out, off);
}

void ring_reduce_scatter(const AlgoParams& p, const void* in, void* out, int64_t block,
                         ReduceOp op) {
  const int n = p.ctx.size();
  const size_t es = dtype_size(p.dtype);
  if (n == 1) {
    if (in != out) std::memmove(out, in, block * es);
    return;
  }
  char* stage = n > 2 ? static_cast<char*>(p.scratch.get(p.scratch.stage, 2 * block * es))
                      : nullptr;
  reduce_scatter_phase(p, static_cast<const char*>(in), equal_blocks(block, n), op, n,
                       [&](int s, int) -> char* {
                         if (s == n - 2) return static_cast<char*>(out);
                         return stage + (s % 2) * block * es;
                       });
}

void ring_allgather(const AlgoParams& p, const void* in, void* out, int64_t block) {
  const int n = p.ctx.size(), r = p.ctx.rank();
  const size_t es = dtype_size(p.dtype);
  char* own = static_cast<char*>(out) + r * block * es;
  auto place_own = [&] {
    if (in != own) std::memmove(own, in, block * es);
  };
  if (n == 1) return place_own();
  allgather_phase(p, static_cast<char*>(out), equal_blocks(block, n),
                  static_cast<const char*>(in), place_own);
}

}  // namespace etr
