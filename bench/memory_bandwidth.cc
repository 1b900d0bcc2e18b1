#include "bench/memory_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "bench/bench_context.h"
#include "bench/premise.h"
#include "bench/table.h"
#include "runtime/allocator.h"
#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/mpi_check.h"

namespace etr::bench {

namespace {

// One streaming pass; vectorised by the compiler (-O3 -march=native).
__attribute__((noinline)) void add_arrays(float* __restrict a, const float* __restrict b,
                                          size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}

}  // namespace

std::string StreamBandwidth::str() const {
  const std::string premise =
      cell("CPUs %s, at most %.2f cores busy per rank", cpus.c_str(), cores_busy);
  if (!refused.empty()) return premise + "; " + refused_cell(refused);
  std::string s = cell("%.1f GB/s per rank", per_rank_gbps);
  if (each_rank_gbps.size() > 1) {
    s += " (each rank by its own clock:";
    for (double g : each_rank_gbps) s += cell(" %.1f", g);
    s += ")";
  }
  return s + cell(", %.1f GB/s aggregate; ", aggregate_gbps) + premise;
}

nlohmann::json StreamBandwidth::to_json() const {
  return {{"kernel", "a[i] += b[i], f32"},
          {"array_bytes", array_bytes},
          {"reps", reps},
          {"bytes_per_pass", 3 * array_bytes},
          {"per_rank_gbps", per_rank_gbps},
          {"aggregate_gbps", aggregate_gbps},
          {"each_rank_gbps", each_rank_gbps},
          {"cpus", cpus},
          {"cores_busy", cores_busy},
          {"premise_failed", refused.empty() ? nlohmann::json(nullptr) : nlohmann::json(refused)}};
}

StreamBandwidth measure_stream_bandwidth(const BenchContext& ctx, size_t array_bytes, int reps) {
  size_t n = array_bytes / sizeof(float);
  HostAllocator alloc;
  Buffer a_buf(alloc, n * sizeof(float)), b_buf(alloc, n * sizeof(float));
  float* a = static_cast<float*>(a_buf.data());  // [n]
  float* b = static_cast<float*>(b_buf.data());  // [n]
  for (size_t i = 0; i < n; ++i) {               // first touch, outside any timing
    a[i] = 0.0f;
    b[i] = 1.0f;
  }
  add_arrays(a, b, n);

  double bytes = 3.0 * static_cast<double>(n * sizeof(float));
  std::vector<double> slowest, mine;
  CpuUse use{.others_seconds = 0, .cpus = {}};  // the timed passes, summed
  for (int r = 0; r < reps; ++r) {
    ctx.barrier();
    CpuMeter meter;
    auto t0 = std::chrono::steady_clock::now();
    add_arrays(a, b, n);
    double t = seconds_since(t0);
    const CpuUse pass = meter.stop();
    accumulate(use, pass);
    mine.push_back(bytes / t / 1e9);
    slowest.push_back(bytes / ctx.max_over_ranks(t) / 1e9);
  }
  if (a[n / 2] != static_cast<float>(reps + 1)) {  // keeps the passes observable
    throw Error("the memory bandwidth kernel computed a wrong sum");
  }

  StreamBandwidth out;
  out.array_bytes = n * sizeof(float);
  out.reps = reps;
  for (const CpuUse& u : ctx.gather_cpu_use(use)) {
    out.cpus += (out.cpus.empty() ? "" : " | ") + format_cpus(u.cpus);
    out.cores_busy = std::max(out.cores_busy, u.cores_busy());
  }
  out.refused = ctx.premise_failure_of_ranks({.threads = 1}, use);
  out.per_rank_gbps = median(slowest);
  out.aggregate_gbps = out.per_rank_gbps * ctx.size();
  double own = median(mine);
  out.each_rank_gbps.resize(static_cast<size_t>(ctx.size()));
  MPI_CHECK(MPI_Allgather(&own, 1, MPI_DOUBLE, out.each_rank_gbps.data(), 1, MPI_DOUBLE,
                          ctx.world().group().comm()));
  return out;
}

void add_memory_bandwidth_subcommand(CLI::App& app, SubcommandList& list) {
  struct Args {
    std::string bytes = "256MiB";
    int reps = 5;
    std::string json;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "membw",
      "Streaming memory bandwidth: every rank runs a[i] += b[i] over two f32 arrays at once");
  cmd->add_option("--bytes", args->bytes, "Size of each array")->capture_default_str();
  cmd->add_option("--reps", args->reps, "Timed passes; the median is reported")
      ->capture_default_str();
  cmd->add_option("--json", args->json, "Also write the result to this JSON file (rank 0)");
  list.push_back({cmd, [args](BenchContext& ctx) {
                    size_t bytes = parse_bytes(args->bytes);
                    if (bytes < sizeof(float)) throw ConfigError("--bytes must be at least 4");
                    if (args->reps < 1) throw ConfigError("--reps must be at least 1");
                    ctx.require_own_cores("etr-bench membw", {.threads = 1});
                    StreamBandwidth bw = measure_stream_bandwidth(ctx, bytes, args->reps);
                    ctx.print("# etr-bench membw: " + ctx.machine().placement() + "\n");
                    ctx.print("# a[i] += b[i] over 2 x " +
                              format_bytes(static_cast<double>(bytes)) +
                              " f32 per rank, all ranks at once, median of " +
                              std::to_string(args->reps) + "; bytes read + written per second\n");
                    ctx.print(
                        "# premise: one thread per rank on a core of its own; refused "
                        "when a rank kept more than 1.15 cores busy (CPU / wall time) "
                        "or ranks share CPUs\n");
                    ctx.print(bw.str() + "\n");
                    if (!args->json.empty()) {
                      ctx.write_json(args->json, {{"machine", ctx.machine().to_json()},
                                                  {"memory_bandwidth", bw.to_json()}});
                    }
                    if (!bw.refused.empty()) throw_refused(1);
                  }});
}

}  // namespace etr::bench
