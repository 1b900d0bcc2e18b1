// The settings of the collective benchmarks (`etr-bench allreduce | reduce_scatter |
// allgather`): their command-line options, and the checked values a run uses.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "collectives/comm_options.h"
#include "collectives/communicator.h"
#include "runtime/dtype.h"

namespace etr::bench {

enum class Kind { kAllreduce, kReduceScatter, kAllgather };

const char* kind_name(Kind k);      // "reduce_scatter"
const char* mpi_call_name(Kind k);  // "MPI_Reduce_scatter_block"

constexpr int kMaxIters = 1 << 20;  // most ops per repetition (and per calibration batch)

// The command line as typed.
struct Args {
  std::string min_bytes = "4KiB";
  std::string max_bytes = "256MiB";
  int step_factor = 4;
  std::string dtype = "f32";
  std::string op = "sum";
  std::string algo;  // empty: ETR_ALLREDUCE_ALGO or auto
  std::string iters = "auto";
  std::string warmup = "auto";
  int reps = 5;
  std::string json;
  std::string stream_bytes = "256MiB";
};

// The command line checked and parsed.
struct Settings {
  Kind kind = Kind::kAllreduce;
  size_t min_bytes = 0, max_bytes = 0;
  int step_factor = 4;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  std::optional<AllreduceAlgo> algo;
  int iters = 0;    // 0: chosen per size so that a repetition lasts >= kRepSeconds
  int warmup = -1;  // -1: chosen per size
  int reps = 5;
  std::string json;
  size_t stream_bytes = 0;  // 0: no memory bandwidth measurement, no ceiling

  nlohmann::json to_json() const;
};

// Registers the options of one collective subcommand, writing into `a`.
void add_collective_options(CLI::App* cmd, Args& a, Kind kind);

// Checks and parses `a`; throws ConfigError with a sentence naming the option.
Settings parse_settings(Kind kind, const Args& a);

}  // namespace etr::bench
