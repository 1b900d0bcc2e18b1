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
//
// Two hosts (two_host_allreduce): there the host ring of phase 2 is a pair, whose ranks
// send both ways at once. Open MPI's TCP transport may put both directions on one of its
// connections; then the op ran at 45-55 % of the link (2 hosts x 2 ranks, 1 Gbit/s),
// against 86-88 % when each direction had a connection of its own (docs/architecture.md,
// "Measured across simulated hosts"). So with H = 2 and L >= 2 every cross-host pair carries data
// one way only: the ranks form the alternating ring A_0 -> B_0 -> A_1 -> B_1 -> ... ->
// B_{L-1} -> A_0 (`alternating`: ring index 2l + host), and the buffer is cut into 2L
// blocks X_0..X_{L-1}, Y_0..Y_{L-1} (ring_segments, aligned):
//   1. within each host, two reduce-scatters (over the X blocks, then the Y blocks):
//      rank l of host A ends with its host's sum of X_l and Y_{l-1}, rank l of host B
//      with X_l and Y_l. In the alternating ring, rank i thus holds blocks c_i and
//      c_{i+1}, where c_{2l} = Y_{l-1} and c_{2l+1} = X_l.
//   2. across: rank i sends its host's c_{i+1} to rank i + 1 and adds rank i - 1's c_i to
//      its own (the average divides here, by 2L), then sends c_i whole and receives
//      c_{i-1} whole. Each c_i is reduced by one rank only.
//   3. within each host, two allgathers: rank l of host A hands on X_{l-1}, Y_{l-1}; of
//      host B X_l, Y_{l-1}.
// The bytes across hosts are those of the general protocol (the buffer once each way per
// host); the messages within a host double.
#pragma once

#include <cstdint>

#include "collectives/ring_common.h"

namespace etr {

// out [count] = reduction over all n = local.size x cross.size ranks of in [count];
// in == out allowed. `local` and `cross` carry their rings' transports and contexts
// (OpContext rank and size within each ring).
void hierarchical_allreduce(const AlgoParams& local, const AlgoParams& cross, const void* in,
                            void* out, int64_t count, ReduceOp op);

// The same for exactly two hosts of L >= 2 ranks each: `local` as above, `alternating`
// the ring of all 2L ranks in the order A_0, B_0, A_1, B_1, ... (OpContext rank 2l + host),
// `host` this rank's host (0 = A, 1 = B).
void two_host_allreduce(const AlgoParams& local, const AlgoParams& alternating, int host,
                        const void* in, void* out, int64_t count, ReduceOp op);

}  // namespace etr
