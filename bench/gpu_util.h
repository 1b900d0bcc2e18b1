// What the GPU benchmarks share (bench/gpu_bench.cc, bench/gpu_kernels_bench.cc): the
// one-rank, one-GPU premise and timing on a stream with CUDA events.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "bench/table.h"
#include "runtime/bytes.h"
#include "runtime/cuda_check.h"

namespace etr::bench {

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

// Median over `reps` timed launches of `op` (after `warm` untimed ones), in seconds.
template <typename Op>
double time_on_stream(cudaStream_t stream, int reps, Op op, int warm = 2) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int w = 0; w < warm; ++w) op();
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    op();
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    s.push_back(ms * 1e-3);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return median(s);
}

// Median over 3 rounds of the mean time of `reps` launches of `op` enqueued back to back
// between two events (after `warm` untimed ones), in seconds: the queue stays full, so
// the host's launch cost is hidden as it is in a training step (a kernel of a few
// microseconds timed alone, from an idle GPU, would carry its launch latency).
template <typename Op>
double time_back_to_back(cudaStream_t stream, int reps, Op op, int warm = 2) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int w = 0; w < warm; ++w) op();
  std::vector<double> s;
  for (int round = 0; round < 3; ++round) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int r = 0; r < reps; ++r) op();
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    s.push_back(ms * 1e-3 / reps);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return median(s);
}

}  // namespace etr::bench
