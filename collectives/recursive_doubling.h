// Recursive-doubling allreduce: the latency-optimised algorithm for small messages
// (log2(n) exchanges of the whole vector instead of the ring's 2(n-1) steps).
//
// Protocol (n ranks, p = largest power of two <= n, e = n - p):
//   fold:    ranks 0..2e-1 pair up; each even rank sends its vector to the odd rank
//            above it and sits out; the odd rank combines and takes part as rank r/2.
//   doubling: for mask = 1, 2, 4, ... < p, exchange the whole vector with the partner
//            (virtual rank ^ mask) and combine. Both partners combine the same two
//            operands (a op b == b op a bitwise), so all ranks agree exactly.
//   unfold:  each odd rank of the fold sends the result back to its even partner.
#pragma once

#include <cstdint>

#include "collectives/ring_common.h"

namespace etr {

void recursive_doubling_allreduce(const AlgoParams& p, const void* in, void* out, int64_t count,
                                  ReduceOp op);

}  // namespace etr
