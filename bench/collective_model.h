// The models behind the collective benchmarks' numbers: which sizes a sweep runs, the
// nccl-tests bus bandwidth factors, and the memory-traffic ceiling
// (n = world size, S = size = bytes of the whole buffer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "bench/collective_settings.h"

namespace etr::bench {

// One size of the sweep. For reduce_scatter and allgather the size is the whole buffer,
// n blocks of M elements: rs reads [n*M] and writes [M]; ag reads [M] and writes [n*M].
struct Point {
  size_t bytes = 0;
  int64_t count = 0;  // elements of the whole buffer
  int64_t in_count = 0, out_count = 0;
};

// min_bytes, x step_factor, ... up to max_bytes, rounded down to whole elements (whole
// blocks for rs/ag, at least one); throws ConfigError past what an MPI count holds.
std::vector<Point> plan_sizes(const Settings& s, int n);

// nccl-tests' bus bandwidth factors: busbw = algbw x factor.
double bus_factor(Kind k, int n);
const char* bus_factor_text(Kind k);  // "2(n-1)/n"

// The busbw ceiling as a multiple of B, the streaming bandwidth of one rank while every
// rank streams (traffic model in collective_model.cc); nothing for one rank.
std::optional<double> ceiling_factor(Kind k, int n);
const char* traffic_model_text(Kind k);  // the model, one line, for the header

}  // namespace etr::bench
