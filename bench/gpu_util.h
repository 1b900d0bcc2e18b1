// What the GPU benchmarks share (bench/gpu_bench.cc, bench/gpu_kernels_bench.cc,
// bench/gpu_train_bench.cc): the one-rank, one-GPU premise, the card's peak, and timing on
// a stream with CUDA events.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "bench/table.h"
#include "runtime/bytes.h"
#include "runtime/cuda_check.h"

namespace etr::bench {

// The card's dense (no sparsity) tensor-core peak in TFLOP/s for `precision`, from
// NVIDIA's datasheets: TF32 494.7 for fp32 (whose products run in TF32), bf16 989 (as
// llm.c counts it) for bf16, on the SXM parts of the H100 ("H100 80GB HBM3") and the H200
// ("H200", not "H200 NVL"); 0 (no MFU) for any other, PCIe and NVL parts included (their
// clocks and peaks are lower). The card's name is cudaGetDeviceProperties' prop.name.
inline double dense_peak_tflops(const std::string& card, const std::string& precision) {
  const bool h100_sxm = card.find("H100 80GB HBM3") != std::string::npos;
  const bool h200_sxm =
      card.find("H200") != std::string::npos && card.find("NVL") == std::string::npos;
  if (!h100_sxm && !h200_sxm) return 0;
  return precision == "bf16" ? 989.0 : 494.7;
}

// Every rank agrees that this is a one-rank run on a machine with a GPU; the name of the
// card for the header.
inline std::string require_one_gpu(const BenchContext& ctx, const std::string& what) {
  std::string error;
  if (ctx.size() != 1) error = what + " measures one GPU: run it on one rank";
  if (error.empty() && cuda_device_count() == 0) error = what + " needs a GPU, and none is visible";
  ctx.agree(error);
  CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  return cell("%s, %d SMs, %s, driver API %d.%d", prop.name, prop.multiProcessorCount,
              format_bytes(static_cast<double>(prop.totalGlobalMem)).c_str(), driver / 1000,
              driver % 1000 / 10);
}

// Median over `rounds` of the mean time of `per_round` launches of `op` enqueued back to
// back between two events, after `warm` untimed launches, in seconds. per_round 1 times
// each launch from an idle GPU, its launch latency included (right for kernels of 100 us
// and more, and for whole training steps); per_round > 1 keeps the queue full, so that a
// kernel of a few microseconds is timed without its launch, as in a training step.
template <typename Op>
double time_on_stream(cudaStream_t stream, int rounds, int per_round, Op op, int warm = 2) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int w = 0; w < warm; ++w) op();
  std::vector<double> s;
  for (int round = 0; round < rounds; ++round) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int r = 0; r < per_round; ++r) op();
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    s.push_back(ms * 1e-3 / per_round);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return median(s);
}

// n token ids in [0, V), reproducible from the seed (a 64-bit LCG's high bits).
inline std::vector<int32_t> random_ids(int64_t n, int64_t V, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int32_t& id : ids) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(V));
  }
  return ids;
}

}  // namespace etr::bench
