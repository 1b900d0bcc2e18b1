// Ring reduce-scatter, ring allgather and their composition, the bandwidth-optimal
// allreduce (each rank sends and receives 2(n-1)/n of the data).
//
// Protocol (n ranks, rank r, segments 0..n-1 of the buffer):
//   reduce-scatter, step s = 0..n-2: send segment (r-1-s) to the right neighbour and
//     receive segment (r-2-s) from the left one, adding this rank's input to it. The
//     segment received at step s is the one sent at step s+1, so after n-1 steps rank r
//     holds segment r summed over all ranks (avg divides on that last hop).
//   allgather, step s = 0..n-2: send segment (r-s), receive segment (r-s-1) in place.
// Every step is chunked and pipelined (ring_step.h). Each segment is reduced by exactly
// one rank, so all ranks end with bitwise identical results. The *_segments variants take
// a shift: rank r then plays segment r + shift's part (hierarchical.h).
//
// Segments are equal blocks (reduce_scatter, allgather) or given as offsets (the
// *_segments variants and allreduce: ring_segments(), 64-byte aligned, the last ones
// shorter or empty when count is not a multiple). Ranks and size are the OpContext's.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/ring_common.h"

namespace etr {

// out [count] = reduction over ranks of in [count]; in == out allowed.
void ring_allreduce(const AlgoParams& p, const void* in, void* out, int64_t count, ReduceOp op);

// out [block] = block r of the reduction of in [n x block]; out may alias block r of in.
void ring_reduce_scatter(const AlgoParams& p, const void* in, void* out, int64_t block,
                         ReduceOp op);

// out [n x block] = every rank's in [block], rank order; in may alias block r of out.
void ring_allgather(const AlgoParams& p, const void* in, void* out, int64_t block);

// Segment s of out := segment s of the reduction of in, where s = r + shift (mod n) and
// segment i is [off[i], off[i+1]) (off: n + 1 ascending offsets, uneven and empty
// segments allowed). The other segments of out are overwritten with partial results.
// in == out allowed. For ReduceOp::kAvg the last hop divides by `avg_divisor` (0: it does
// not divide, the segment holds the sum); other ops ignore it. `shift` (the same on every
// rank) only changes which rank ends with which segment.
void ring_reduce_scatter_segments(const AlgoParams& p, const void* in, void* out,
                                  const std::vector<int64_t>& off, ReduceOp op, int avg_divisor,
                                  int shift = 0);

// Segment i of out := the segment i held by rank i - shift (mod n), given each rank's own
// segment r + shift in place in out.
void ring_allgather_segments(const AlgoParams& p, void* out, const std::vector<int64_t>& off,
                             int shift = 0);

}  // namespace etr
