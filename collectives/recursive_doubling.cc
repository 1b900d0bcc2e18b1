#include "collectives/recursive_doubling.h"

#include <cstring>

#include "collectives/reduce_kernels.h"

namespace etr {

void recursive_doubling_allreduce(const AlgoParams& p, const void* in, void* out, int64_t count,
                                  ReduceOp op) {
  const int n = p.ctx.size(), r = p.ctx.rank();
  const size_t bytes = static_cast<size_t>(count) * dtype_size(p.dtype);
  if (in != out) std::memcpy(out, in, bytes);
  if (n == 1) return;
  Transport& t = p.transport;
  void* theirs = p.scratch.get(p.scratch.whole, bytes);

  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  const int extra = n - pow2;

  int vrank;  // rank among the pow2 participants, -1 when folded away
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      Transport::Request req = t.isend(out, bytes, r + 1, kTagRecursiveDoubling);
      wait_requests(t, p.ctx, &req, 1, r + 1);
      vrank = -1;
    } else {
      Transport::Request req = t.irecv(theirs, bytes, r - 1, kTagRecursiveDoubling);
      wait_requests(t, p.ctx, &req, 1, r - 1);
      reduce(p.dtype, op, out, out, theirs, count);
      vrank = r / 2;
    }
  } else {
    vrank = r - extra;
  }

  if (vrank >= 0) {
    for (int mask = 1; mask < pow2; mask <<= 1) {
      const int vpeer = vrank ^ mask;
      const int peer = vpeer < extra ? vpeer * 2 + 1 : vpeer + extra;
      Transport::Request reqs[2] = {
          t.irecv(theirs, bytes, peer, kTagRecursiveDoubling),
          t.isend(out, bytes, peer, kTagRecursiveDoubling)};
      wait_requests(t, p.ctx, reqs, 2, peer);
      reduce(p.dtype, op, out, out, theirs, count);
    }
    if (op == ReduceOp::kAvg) divide(p.dtype, out, count, n);
  }

  if (r < 2 * extra) {
    Transport::Request req = r % 2 == 0 ? t.irecv(out, bytes, r + 1, kTagRecursiveDoubling)
                                        : t.isend(out, bytes, r - 1, kTagRecursiveDoubling);
    wait_requests(t, p.ctx, &req, 1, r % 2 == 0 ? r + 1 : r - 1);
  }
}

}  // namespace etr
