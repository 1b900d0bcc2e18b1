#include "bench/collective_settings.h"

#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr::bench {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAllreduce:
      return "allreduce";
    case Kind::kReduceScatter:
      return "reduce_scatter";
    case Kind::kAllgather:
      return "allgather";
  }
  return "?";
}

const char* mpi_call_name(Kind k) {
  switch (k) {
    case Kind::kAllreduce:
      return "MPI_Allreduce";
    case Kind::kReduceScatter:
      return "MPI_Reduce_scatter_block";
    case Kind::kAllgather:
      return "MPI_Allgather";
  }
  return "?";
}

nlohmann::json Settings::to_json() const {
  return {{"collective", kind_name(kind)},
          {"min_bytes", min_bytes},
          {"max_bytes", max_bytes},
          {"step_factor", step_factor},
          {"dtype", dtype_name(dtype)},
          {"op", reduce_op_name(op)},
          {"algo", algo ? allreduce_algo_name(*algo) : "default"},
          {"iters", iters ? nlohmann::json(iters) : nlohmann::json("auto")},
          {"warmup", warmup >= 0 ? nlohmann::json(warmup) : nlohmann::json("auto")},
          {"reps", reps},
          {"stream_bytes", stream_bytes}};
}

namespace {

ReduceOp parse_reduce_op(const std::string& name) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    if (name == reduce_op_name(op)) return op;
  }
  throw ConfigError("unknown --op '" + name + "'; use sum, avg, max or min");
}

// "auto" -> `automatic`; otherwise an integer >= `min`.
int parse_count(const std::string& text, const char* flag, int min, int automatic) {
  if (text == "auto") return automatic;
  size_t pos = 0;
  long v = 0;
  try {
    v = std::stol(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != text.size() || v < min || v > kMaxIters) {
    throw ConfigError(std::string(flag) + " must be 'auto' or a whole number from " +
                      std::to_string(min) + " to " + std::to_string(kMaxIters) + ", not '" + text +
                      "'");
  }
  return static_cast<int>(v);
}

}  // namespace

Settings parse_settings(Kind kind, const Args& a) {
  Settings s;
  s.kind = kind;
  s.min_bytes = parse_bytes(a.min_bytes);
  s.max_bytes = parse_bytes(a.max_bytes);
  if (s.min_bytes < 1) throw ConfigError("--min-bytes must be at least 1");
  if (s.max_bytes < s.min_bytes) {
    throw ConfigError("--max-bytes (" + a.max_bytes + ") is smaller than --min-bytes (" +
                      a.min_bytes + ")");
  }
  if (a.step_factor < 2) throw ConfigError("--step-factor must be a whole number of at least 2");
  s.step_factor = a.step_factor;
  s.dtype = parse_dtype(a.dtype);
  s.op = parse_reduce_op(a.op);
  if (!a.algo.empty()) s.algo = parse_allreduce_algo(a.algo);
  s.iters = parse_count(a.iters, "--iters", 1, 0);
  s.warmup = parse_count(a.warmup, "--warmup", 0, -1);
  if (a.reps < 1) throw ConfigError("--reps must be at least 1");
  s.reps = a.reps;
  s.json = a.json;
  s.stream_bytes = parse_bytes(a.stream_bytes);
  if (s.stream_bytes != 0 && s.stream_bytes < sizeof(float)) {
    throw ConfigError("--stream-bytes must be 0 (skip) or at least 4");
  }
  return s;
}

void add_collective_options(CLI::App* cmd, Args& a, Kind kind) {
  cmd->add_option("--min-bytes", a.min_bytes, "Smallest size: 4096, 64KiB, 1MiB, ...")
      ->capture_default_str();
  cmd->add_option("--max-bytes", a.max_bytes, "Largest size")->capture_default_str();
  cmd->add_option("--step-factor", a.step_factor, "Each size is this many times the last")
      ->capture_default_str();
  cmd->add_option("--dtype", a.dtype, "Element type: f32, bf16, f16, f64 or i32")
      ->capture_default_str();
  if (kind != Kind::kAllgather) {
    cmd->add_option("--op", a.op, "Reduction: sum, avg, max or min")->capture_default_str();
  }
  cmd->add_option("--algo", a.algo,
                  "etr's allreduce algorithm: auto, ring, rd or mpi (default: ETR_ALLREDUCE_ALGO, "
                  "else auto)");
  cmd->add_option("--iters", a.iters, "Ops per timed repetition (auto: enough for >= 20 ms)")
      ->capture_default_str();
  cmd->add_option("--warmup", a.warmup, "Untimed ops per size before timing (auto: by size)")
      ->capture_default_str();
  cmd->add_option("--reps", a.reps, "Timed repetitions; the median is reported")
      ->capture_default_str();
  cmd->add_option("--stream-bytes", a.stream_bytes,
                  "Array size of the memory bandwidth measurement (0 skips it and the ceiling)")
      ->capture_default_str();
  cmd->add_option("--json", a.json, "Also write the results to this JSON file (rank 0)");
}

}  // namespace etr::bench
