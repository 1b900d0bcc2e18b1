// The data the collective benchmarks run on, and the check of etr's output against MPI's.
//
// Element i of rank r is a small integer in [-8, 8] (a hash of i and r), so every dtype
// holds it exactly and so do sums over up to 32 ranks (|sum| <= 256, exact even in bf16):
// a sum is then the same whatever order an algorithm adds in, and the tolerance only has
// to absorb the division of avg.
#pragma once

#include <string>

#include "runtime/tensor.h"

namespace etr::bench {

// Writes the pattern of `rank` into every element of `view` (host memory).
void fill_pattern(const TensorView& view, int rank);

// "" when etr's `got` equals MPI's `want` / `divisor` element-wise (exact for i32 except
// avg, which may round either way; within a relative tolerance for floats), otherwise a
// sentence naming the first bad element, both values and how many differ.
std::string compare_outputs(const TensorView& got, const TensorView& want, int divisor);

}  // namespace etr::bench
