// Streaming memory bandwidth, measured in the same run as the collectives so that their
// memory-traffic ceiling uses this machine's number under the same load: every rank at
// once runs `a[i] += b[i]` over two f32 arrays far beyond the caches. Bytes counted per
// pass: read a, read b, write a = 3 x array bytes.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/subcommand.h"

namespace etr::bench {

class BenchContext;

struct StreamBandwidth {
  size_t array_bytes = 0;  // size of each of the two arrays
  int reps = 0;
  // Per rank, with every rank streaming at once: median over reps of the traffic of one
  // pass divided by the slowest rank's time for it. The ceilings use this number.
  double per_rank_gbps = 0;
  double aggregate_gbps = 0;           // per_rank_gbps x world size
  std::vector<double> each_rank_gbps;  // [world size], each rank's own median
  // The premise (bench/premise.h): one thread per rank, each on a core of its own, over
  // the timed passes. A refused measurement has no figure a ceiling may use.
  std::string cpus;       // each rank's CPUs: "0 | 1"
  double cores_busy = 0;  // the most cores a rank kept busy (CPU / wall time)
  std::string refused;    // why the premise failed; "" when it held

  // "29.9 GB/s per rank (ranks: 30.1 29.9), 59.8 GB/s aggregate; CPUs 0 | 1, at most
  // 1.00 cores busy per rank", or "premise failed: ..." in place of the figures
  std::string str() const;
  nlohmann::json to_json() const;
};

// Collective: allocates and touches two arrays of `array_bytes` per rank, one untimed
// pass, then `reps` timed passes started together after a barrier.
StreamBandwidth measure_stream_bandwidth(const BenchContext& ctx, size_t array_bytes, int reps);

// `etr-bench membw`: prints the measurement alone.
void add_memory_bandwidth_subcommand(CLI::App& app, SubcommandList& list);

}  // namespace etr::bench
