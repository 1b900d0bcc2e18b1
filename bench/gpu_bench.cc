#include "bench/gpu_bench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "bench/gpu_util.h"
#include "bench/table.h"
#include "runtime/bytes.h"
#include "runtime/cuda_allocator.h"
#include "runtime/cuda_check.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/elementwise.h"

namespace etr::bench {

namespace {

// --- gpu-alloc ---------------------------------------------------------------------------

// Median over `reps` loops of the mean time of one allocate + free pair, in microseconds.
template <typename Pair>
double time_pairs(int reps, int pairs, Pair pair) {
  pair();  // warm: the caching allocator's first request reaches cudaMalloc
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < pairs; ++i) pair();
    us.push_back(seconds_since(t0) * 1e6 / pairs);
  }
  return median(us);
}

void run_gpu_alloc(BenchContext& ctx, size_t max_bytes, int pairs, const std::string& json) {
  const std::string card = require_one_gpu(ctx, "etr-bench gpu-alloc");
  ctx.print("# etr-bench gpu-alloc: " + card + "\n");
  ctx.print(
      cell("# one allocate + free pair, microseconds, median of 5 loops of %d pairs;"
           " reference: cudaMalloc + cudaFree\n",
           pairs));
  Table t;
  t.add_column("size", 10).add_column("us/pair", 10, "cudaMalloc");
  t.add_column("us/pair", 10, "etr cache").add_column("speed-up", 10);
  ctx.print(t.header());
  CudaCachingAllocator alloc(0);
  nlohmann::json rows = nlohmann::json::array();
  for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 16) {
    double ref = time_pairs(5, pairs, [bytes] {
      void* p = nullptr;
      CUDA_CHECK(cudaMalloc(&p, bytes));
      CUDA_CHECK(cudaFree(p));
    });
    double ours =
        time_pairs(5, pairs, [&alloc, bytes] { alloc.deallocate(alloc.allocate(bytes)); });
    ctx.print(t.row({format_bytes(static_cast<double>(bytes)), cell("%.2f", ref),
                     cell("%.3f", ours), cell("%.0fx", ref / ours)}));
    rows.push_back({{"bytes", bytes}, {"cuda_malloc_free_us", ref}, {"etr_cache_us", ours}});
  }
  if (!json.empty()) {
    ctx.write_json(json,
                   {{"machine", ctx.machine().to_json()}, {"gpu", card}, {"gpu_alloc", rows}});
  }
}

// --- gpu-cast ----------------------------------------------------------------------------

void run_gpu_cast(BenchContext& ctx, size_t bytes, int reps, const std::string& json) {
  const std::string card = require_one_gpu(ctx, "etr-bench gpu-cast");
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  if (n < 1) throw ConfigError("--bytes must be at least 4");
  ctx.print("# etr-bench gpu-cast: " + card + "\n");
  ctx.print(
      cell("# %lld elements (%s of f32), median of %d launches timed by CUDA events; GB/s"
           " counts bytes read + written; reference: cudaMemcpyAsync device to device\n",
           static_cast<long long>(n), format_bytes(static_cast<double>(n * 4)).c_str(), reps));
  CudaCachingAllocator alloc(0);
  Buffer f32(alloc, static_cast<size_t>(n) * 4), f32_out(alloc, static_cast<size_t>(n) * 4);
  Buffer bf16(alloc, static_cast<size_t>(n) * 2);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaMemsetAsync(f32.data(), 0, static_cast<size_t>(n) * 4, stream));

  struct Op {
    std::string name;
    double bytes_moved;
    std::function<void()> run;
  };
  const double nd = static_cast<double>(n);
  std::vector<Op> ops = {
      {"memcpy d2d (reference)", 8 * nd,
       [&] {
         CUDA_CHECK(cudaMemcpyAsync(f32_out.data(), f32.data(), static_cast<size_t>(n) * 4,
                                    cudaMemcpyDeviceToDevice, stream));
       }},
      {"cast f32 -> bf16", 6 * nd,
       [&] { cuda_cast(f32.data(), DType::kF32, bf16.data(), DType::kBF16, n, stream); }},
      {"cast bf16 -> f32", 6 * nd,
       [&] { cuda_cast(bf16.data(), DType::kBF16, f32_out.data(), DType::kF32, n, stream); }},
      {"scale f32 in place", 8 * nd,
       [&] { cuda_scale(f32_out.data(), DType::kF32, n, 0.5, stream); }},
  };
  Table t;
  t.add_column("operation", 24).add_column("bytes", 11).add_column("time(us)", 10);
  t.add_column("GB/s", 8).add_column("% of copy", 10);
  ctx.print(t.header());
  double copy_gbps = 0;
  nlohmann::json rows = nlohmann::json::array();
  for (const Op& op : ops) {
    double s = time_on_stream(stream, reps, /*per_round=*/1, op.run);
    double gbps = op.bytes_moved / s / 1e9;
    if (copy_gbps == 0) copy_gbps = gbps;
    ctx.print(t.row({op.name, format_bytes(op.bytes_moved), cell("%.1f", s * 1e6),
                     cell("%.0f", gbps), cell("%.0f%%", 100 * gbps / copy_gbps)}));
    rows.push_back(
        {{"operation", op.name}, {"bytes_moved", op.bytes_moved}, {"seconds", s}, {"gbps", gbps}});
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  if (!json.empty()) {
    ctx.write_json(json, {{"machine", ctx.machine().to_json()}, {"gpu", card}, {"gpu_cast", rows}});
  }
}

}  // namespace

void add_gpu_subcommands(CLI::App& app, SubcommandList& list) {
  struct AllocArgs {
    std::string max_bytes = "1GiB";
    int pairs = 200;
    std::string json;
  };
  auto a = std::make_shared<AllocArgs>();
  CLI::App* alloc = app.add_subcommand(
      "gpu-alloc", "The caching allocator beside cudaMalloc + cudaFree (one rank, one GPU)");
  alloc->add_option("--max-bytes", a->max_bytes, "Largest size (sizes 4 KiB x 16^k)")
      ->capture_default_str();
  alloc->add_option("--pairs", a->pairs, "Allocate + free pairs per timed loop")
      ->capture_default_str();
  alloc->add_option("--json", a->json, "Also write the figures to this JSON file");
  list.push_back({alloc, [a](BenchContext& ctx) {
                    if (a->pairs < 1) throw ConfigError("--pairs must be at least 1");
                    run_gpu_alloc(ctx, parse_bytes(a->max_bytes), a->pairs, a->json);
                  }});

  struct CastArgs {
    std::string bytes = "256MiB";
    int reps = 20;
    std::string json;
  };
  auto c = std::make_shared<CastArgs>();
  CLI::App* cast = app.add_subcommand(
      "gpu-cast", "cuda_cast and cuda_scale beside a device-to-device copy (one rank, one GPU)");
  cast->add_option("--bytes", c->bytes, "f32 bytes per operand")->capture_default_str();
  cast->add_option("--reps", c->reps, "Timed launches; the median is reported")
      ->capture_default_str();
  cast->add_option("--json", c->json, "Also write the figures to this JSON file");
  list.push_back({cast, [c](BenchContext& ctx) {
                    if (c->reps < 1) throw ConfigError("--reps must be at least 1");
                    run_gpu_cast(ctx, parse_bytes(c->bytes), c->reps, c->json);
                  }});
}

}  // namespace etr::bench
