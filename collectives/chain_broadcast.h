// Pipelined chain broadcast: the root streams pieces to the next rank of the ring,
// which forwards each piece as soon as it has arrived. Time ~ (pieces + n - 2) piece
// transfers, so large messages move at link speed whatever n is; small ones pay n-1
// hops, which is fine for the small groups etr runs on one host (a binomial tree
// would be the choice for large n).
#pragma once

#include <cstdint>

#include "collectives/ring_common.h"

namespace etr {

void chain_broadcast(const AlgoParams& p, void* data, int64_t count, int root);

// Dissemination barrier: ceil(log2 n) rounds of empty messages to rank + 2^k.
void dissemination_barrier(Transport& t, OpContext& ctx);

}  // namespace etr
