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
// one rank, so all ranks end with bitwise identical results.
#pragma once

#include <cstdint>

#include "collectives/ring_common.h"

namespace etr {

// out [count] = reduction over ranks of in [count]; in == out allowed.
void ring_allreduce(const AlgoParams& p, const void* in, void* out, int64_t count, ReduceOp op);

// out [block] = block r of the reduction of in [n x block]; out may alias block r of in.
void ring_reduce_scatter(const AlgoParams& p, const void* in, void* out, int64_t block,
                         ReduceOp op);

// out [n x block] = every rank's in [block], rank order; in may alias block r of out.
void ring_allgather(const AlgoParams& p, const void* in, void* out, int64_t block);

}  // namespace etr
