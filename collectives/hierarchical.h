// Hierarchical allreduce: for ranks spread over H hosts with L ranks on each, the
// ring's traffic across hosts shrinks from 2(n-1)/n to 2(H-1)/H of the buffer per host
// (n = H x L), because only one rank per host and segment crosses the network.
//
// Protocol (host h, local index l; `local` = the L ranks of this host, `cross` = the H
// ranks with local index l, one per host, in host order):
//   1. reduce-scatter within the host (ring over `local`, shared memory): the buffer is
//      cut into L segments at ring_segments(count, L) (64-byte aligned; uneven, possibly
//      empty); afterwards rank l holds segment l summed over its host's ranks, in out.
//   2. ring allreduce of segment l over `cross` (network): the segment is cut again into
//      H pieces (ring_segments, aligned); each piece is reduced by one rank of `cross`, so
//      every host ends with the same bits. An average divides by n = H x L, once, on the
//      last hop of this phase.
//   3. allgather within the host (ring over `local`): segment l from rank l to the others.
// Each element is thus reduced in one fixed order (its host's ring, then the host ring)
// and all ranks end bitwise identical. A rank starts phase 2 as soon as its own phase 1
// is done; hosts need not wait for each other. Every phase runs the chunked and
// pipelined ring steps (ring_step.h), each over its own transport.
#pragma once

#include <cstdint>

#include "collectives/ring_common.h"

namespace etr {

// out [count] = reduction over all n = local.size x cross.size ranks of in [count];
// in == out allowed. `local` and `cross` carry their rings' transports and contexts
// (OpContext rank and size within each ring).
void hierarchical_allreduce(const AlgoParams& local, const AlgoParams& cross, const void* in,
                            void* out, int64_t count, ReduceOp op);

}  // namespace etr
