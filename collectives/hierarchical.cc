#include "collectives/hierarchical.h"

#include <vector>

#include "collectives/ring_algorithms.h"

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

}  // namespace etr
