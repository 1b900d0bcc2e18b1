// Internal to the CUDA kernel set: the launch shape of its element-wise kernels and the
// element-count check of their launchers.
//
// Grid-stride loops with 64-bit indices: a launch of at most kGridStrideBlocks x
// kGridStrideThreads threads covers any n, each thread stepping by the grid size, so no n
// overflows the grid and small n launch only the blocks they need.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/error.h"

namespace etr::cuda::detail {

constexpr int kGridStrideThreads = 256;
constexpr int64_t kGridStrideBlocks = 8192;

inline int grid_stride_blocks(int64_t n) {
  return static_cast<int>(
      std::min<int64_t>((n + kGridStrideThreads - 1) / kGridStrideThreads, kGridStrideBlocks));
}

// Throws InvalidArgument naming `what` for a negative element count.
inline void check_count(int64_t n, const char* what) {
  if (n < 0) {
    throw InvalidArgument(std::string(what) + " got a negative element count " + std::to_string(n) +
                          "; pass the number of elements (>= 0)");
  }
}

}  // namespace etr::cuda::detail
