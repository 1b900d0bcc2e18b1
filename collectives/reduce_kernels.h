// Element-wise reductions of the host collectives: dst[i] = a[i] (op) b[i].
//
// f32/f64/i32 reduce natively; bf16/f16 are widened to f32, combined, and rounded
// back once (round to nearest even), so each hop of a ring rounds exactly once.
// Every op is commutative bit for bit (a op b == b op a, NaN-propagating max/min), so
// ranks that combine the same two operands in either order agree exactly. dst may alias
// a or b. kAvg reduces like kSum; the last hop divides (reduce_avg_last / divide).
#pragma once

#include <cstddef>

#include "collectives/communicator.h"
#include "runtime/dtype.h"

namespace etr {

void reduce(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t n);

// dst[i] = (a[i] + b[i]) / divisor: the final hop of an average.
void reduce_avg_last(DType dtype, void* dst, const void* a, const void* b, size_t n, int divisor);

// One hop of a ring's reduction: reduce(), or for kAvg with avg_divisor > 0 (the last
// hop) reduce_avg_last().
void reduce_hop(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t n,
                int avg_divisor);

// data[i] /= divisor.
void divide(DType dtype, void* data, size_t n, int divisor);

}  // namespace etr
