// GPU benchmarks (built with CUDA only; one rank, GPU 0; more ranks are refused):
//
//   etr-bench gpu-alloc: CudaCachingAllocator's allocate + deallocate beside cudaMalloc +
//       cudaFree of the same size (the reference: what a step would pay without the cache),
//       microseconds per pair, at sizes from 4 KiB to 1 GiB.
//   etr-bench gpu-cast: cuda_cast f32 -> bf16, bf16 -> f32 and cuda_scale f32 beside
//       cudaMemcpyAsync device to device (the reference: the copy engine's and the
//       memory's ceiling for a kernel that reads and writes once), GB/s counting bytes
//       read + written, timed with CUDA events.
//
// A machine without a visible GPU gets one sentence and exit status 1.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "bench/subcommand.h"

namespace etr::bench {

void add_gpu_subcommands(CLI::App& app, SubcommandList& list);

// etr-bench gpu-kernels (bench/gpu_kernels_bench.cc): every CUDA kernel of the GPT at GPT-2
// 124M's shapes, beside PyTorch's timings of the same operations (--reference, the JSON of
// bench/pytorch_gpu_kernels.py run on the same card just before).
void add_gpu_kernels_subcommand(CLI::App& app, SubcommandList& list);

// etr-bench gpu-train (bench/gpu_train_bench.cc): GPT-2 124M training steps on one GPU
// through etr's layers, beside PyTorch's runs of the same model (--reference, the JSON of
// bench/pytorch_gpu_train.py).
void add_gpu_train_subcommand(CLI::App& app, SubcommandList& list);
// The same, for `etr-bench train --device cuda`: gpu-train's model and micro-batch (GPT-2
// 124M, 8 x 1024) with these steps, precision ("fp32" or "bf16": the etr-train loop's
// runtime.precision and the MFU's peak), references and JSON file.
void run_gpu_train_for(BenchContext& ctx, int steps, int warmup, const std::string& precision,
                       const std::vector<std::string>& references, const std::string& json);

}  // namespace etr::bench
