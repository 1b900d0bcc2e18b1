// `etr-bench batch`, table 4: the noise scale's estimator against known values, and the
// cost of a goodput decision (bench/batch_noise.cc).
#pragma once

#include <nlohmann/json.hpp>

namespace etr::bench {

class BenchContext;

// Rank 0 prints the table and returns its rows; the other ranks an empty object.
nlohmann::json noise_table(BenchContext& ctx, int noise_steps);

}  // namespace etr::bench
