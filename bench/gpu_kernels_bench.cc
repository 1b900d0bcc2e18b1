// etr-bench gpu-kernels: every CUDA kernel of the GPT (runtime/kernels/cuda) at GPT-2
// 124M's shapes (B 8, T 1024, C 768, NH 12, V 50257 padded to 50304; AdamW and the norm
// over 124475904 parameters), timed by CUDA events around launches enqueued back to back
// (gpu_util.h's time_on_stream: the launch cost hidden, as PyTorch's script hides it behind a GPU
// sleep), beside PyTorch's implementation of the same operation on the same card
// (bench/pytorch_gpu_kernels.py, whose JSON --reference reads). Matrix products in TF32 on both
// sides (etr's default, PyTorch's allow_tf32).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "bench/gpu_bench.h"
#include "bench/gpu_util.h"
#include "bench/table.h"
#include "runtime/cuda_allocator.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/adamw.h"
#include "runtime/kernels/cuda/attention.h"
#include "runtime/kernels/cuda/cublas.h"
#include "runtime/kernels/cuda/encoder.h"
#include "runtime/kernels/cuda/gelu.h"
#include "runtime/kernels/cuda/layernorm.h"
#include "runtime/kernels/cuda/matmul.h"
#include "runtime/kernels/cuda/residual.h"
#include "runtime/kernels/cuda/softmax_xent.h"

namespace etr::bench {

namespace {

struct KernelShapes {
  int64_t B = 8, T = 1024, C = 768, NH = 12, V = 50257, Vp = 50304;
  int64_t params = 124475904;
};

// Device arrays of random values in [-1, 1), from one pool: a host block of random floats
// copied tile by tile (cheap for 124M-element arrays).
class DevicePool {
 public:
  explicit DevicePool(CudaCachingAllocator& alloc) : alloc_(alloc), block_(size_t{1} << 22) {
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (float& x : block_) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      x = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-52 - 1.0);
    }
  }
  float* floats(int64_t n) {
    buffers_.push_back(std::make_unique<Buffer>(alloc_, static_cast<size_t>(n) * sizeof(float)));
    auto* p = static_cast<float*>(buffers_.back()->data());
    for (int64_t i = 0; i < n; i += static_cast<int64_t>(block_.size())) {
      int64_t k = std::min<int64_t>(n - i, static_cast<int64_t>(block_.size()));
      CUDA_CHECK(cudaMemcpy(p + i, block_.data(), static_cast<size_t>(k) * sizeof(float),
                            cudaMemcpyHostToDevice));
    }
    return p;
  }
  int32_t* ids(int64_t n, int64_t V, uint64_t seed) {
    const std::vector<int32_t> host = random_ids(n, V, seed);
    buffers_.push_back(std::make_unique<Buffer>(alloc_, host.size() * sizeof(int32_t)));
    CUDA_CHECK(cudaMemcpy(buffers_.back()->data(), host.data(), host.size() * sizeof(int32_t),
                          cudaMemcpyHostToDevice));
    return static_cast<int32_t*>(buffers_.back()->data());
  }
  void release() { buffers_.clear(); }

 private:
  CudaCachingAllocator& alloc_;
  std::vector<float> block_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

struct KernelRow {
  std::string name;
  std::function<void()> run;
};

// The rows of one transformer layer's kernels plus the embedding, head, loss and
// optimizer; buffers come from `pool` and live until the pool is released.
std::vector<KernelRow> kernel_rows(const KernelShapes& s, DevicePool& pool, cudaStream_t st) {
  const int64_t N = s.B * s.T, C = s.C;
  std::vector<KernelRow> rows;
  int32_t* tokens = pool.ids(N, s.V, /*seed=*/1);
  float *wte = pool.floats(s.Vp * C), *wpe = pool.floats(s.T * C), *x = pool.floats(N * C);
  float *dx = pool.floats(N * C), *dwte = pool.floats(s.Vp * C), *dwpe = pool.floats(s.T * C);
  rows.push_back(
      {"encoder fwd", [=] { cuda::encoder_forward(x, tokens, wte, wpe, s.B, s.T, C, s.V, st); }});
  rows.push_back({"encoder bwd",
                  [=] { cuda::encoder_backward(dwte, dwpe, dx, tokens, s.B, s.T, C, s.V, st); }});

  float *ln = pool.floats(N * C), *mean = pool.floats(N), *rstd = pool.floats(N);
  float *w = pool.floats(C), *b = pool.floats(C), *dw = pool.floats(C), *db = pool.floats(C);
  float* dln = pool.floats(N * C);
  rows.push_back(
      {"layernorm fwd", [=] { cuda::layernorm_forward(ln, mean, rstd, x, w, b, N, C, st); }});
  rows.push_back({"layernorm bwd",
                  [=] { cuda::layernorm_backward(dx, dw, db, dln, x, w, mean, rstd, N, C, st); }});

  // The four products of a layer and the LM head: name, input width, output width, bias.
  struct Product {
    const char* name;
    int64_t in, out;
    bool bias;
  };
  for (const Product& p :
       {Product{"matmul qkv", C, 3 * C, true}, Product{"matmul attproj", C, C, true},
        Product{"matmul fc", C, 4 * C, true}, Product{"matmul fcproj", 4 * C, C, true},
        Product{"lm head", C, s.Vp, false}}) {
    float *in = pool.floats(N * p.in), *wt = pool.floats(p.out * p.in),
          *out = pool.floats(N * p.out);
    float *bias = p.bias ? pool.floats(p.out) : nullptr,
          *dbias = p.bias ? pool.floats(p.out) : nullptr;
    float *din = pool.floats(N * p.in), *dwt = pool.floats(p.out * p.in);
    const int64_t in_w = p.in, out_w = p.out;
    rows.push_back({std::string(p.name) + " fwd",
                    [=] { cuda::matmul_forward(out, in, wt, bias, N, in_w, out_w, st); }});
    rows.push_back({std::string(p.name) + " bwd", [=] {
                      cuda::matmul_backward(din, dwt, dbias, out, in, wt, N, in_w, out_w, st);
                    }});
  }

  float *qkv = pool.floats(N * 3 * C), *att = pool.floats(s.B * s.NH * s.T * s.T);
  float* dqkv = pool.floats(N * 3 * C);
  const int64_t scratch_n = cuda::attention_backward_scratch_size(s.B, s.T, C, s.NH);
  float* scratch = pool.floats(scratch_n);
  rows.push_back(
      {"attention fwd", [=] { cuda::attention_forward(x, att, qkv, s.B, s.T, C, s.NH, st); }});
  rows.push_back({"attention bwd", [=] {
                    cuda::attention_backward(dqkv, scratch, scratch_n, dx, qkv, att, s.B, s.T, C,
                                             s.NH, st);
                  }});

  float *r1 = pool.floats(N * C), *r2 = pool.floats(N * C), *d1 = pool.floats(N * C),
        *d2 = pool.floats(N * C);
  rows.push_back({"residual fwd", [=] { cuda::residual_forward(x, r1, r2, N * C, st); }});
  rows.push_back({"residual bwd", [=] { cuda::residual_backward(d1, d2, dx, N * C, st); }});

  float *h = pool.floats(N * 4 * C), *g = pool.floats(N * 4 * C), *dh = pool.floats(N * 4 * C);
  rows.push_back({"gelu fwd", [=] { cuda::gelu_forward(g, h, N * 4 * C, st); }});
  rows.push_back({"gelu bwd", [=] { cuda::gelu_backward(dh, h, g, N * 4 * C, st); }});

  int32_t* targets = pool.ids(N, s.V, /*seed=*/2);
  float *logits = pool.floats(N * s.Vp), *dlogits = pool.floats(N * s.Vp), *losses = pool.floats(N);
  rows.push_back({"softmax xent fwd+bwd", [=] {
                    cuda::softmax_xent_forward_backward(losses, dlogits, logits, targets,
                                                        1.0f / static_cast<float>(N), N, s.V, s.Vp,
                                                        st);
                  }});

  float *params = pool.floats(s.params), *grads = pool.floats(s.params);
  float *m = pool.floats(s.params), *v = pool.floats(s.params);
  CUDA_CHECK(cudaMemset(v, 0, static_cast<size_t>(s.params) * sizeof(float)));  // v >= 0
  double* norm = reinterpret_cast<double*>(pool.floats(2));
  rows.push_back({"adamw step", [=] {
                    cuda::adamw_update(params, grads, m, v, s.params, 1, 3e-4, 0.9, 0.95, 1e-8, 0.1,
                                       st);
                  }});
  rows.push_back({"grad norm", [=] { cuda::grad_norm_squared(norm, grads, s.params, st); }});
  return rows;
}

// name -> milliseconds from bench/pytorch_gpu_kernels.py's JSON; empty without a file.
std::map<std::string, double> read_reference(const std::string& path, std::string* about) {
  std::map<std::string, double> ms;
  if (path.empty()) return ms;
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot read the reference " + path);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
    for (const auto& r : doc.at("rows"))
      ms[r.at("name").get<std::string>()] = r.at("ms").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("the reference " + path +
                      " is not the JSON of bench/pytorch_gpu_kernels.py (" + e.what() + ")");
  }
  *about = "PyTorch " + doc.value("torch", std::string("?")) + " on " +
           doc.value("device", std::string("?")) +
           (doc.value("tf32", false) ? ", TF32" : ", FP32") +
           (doc.value("fused_adamw", false) ? ", fused AdamW" : "");
  return ms;
}

void run_gpu_kernels(BenchContext& ctx, int reps, const std::string& reference,
                     const std::string& json) {
  const std::string card = require_one_gpu(ctx, "etr-bench gpu-kernels");
  std::string about;
  const std::map<std::string, double> ref = read_reference(reference, &about);
  KernelShapes s;
  ctx.print("# etr-bench gpu-kernels: " + card + "\n");
  ctx.print(
      cell("# GPT-2 124M shapes: B %lld, T %lld, C %lld, NH %lld, V %lld (padded %lld); "
           "optimizer over %lld parameters; f32, TF32 products; %d launches back to back, "
           "median of 3 rounds\n",
           static_cast<long long>(s.B), static_cast<long long>(s.T), static_cast<long long>(s.C),
           static_cast<long long>(s.NH), static_cast<long long>(s.V), static_cast<long long>(s.Vp),
           static_cast<long long>(s.params), reps));
  ctx.print("# reference: " + (ref.empty() ? std::string("none (--reference FILE)") : about) +
            "\n");
  cuda::set_matmul_math(cuda::MatmulMath::kTF32);
  CudaCachingAllocator alloc(0);
  DevicePool pool(alloc);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Table t;
  t.add_column("kernel", 22)
      .add_column("etr ms", 10)
      .add_column("torch ms", 10)
      .add_column("torch/etr", 10);
  ctx.print(t.header());
  nlohmann::json rows = nlohmann::json::array();
  double etr_total = 0, ref_total = 0;
  const std::vector<KernelRow> kernels = kernel_rows(s, pool, stream);
  // The pool's uploads are pageable cudaMemcpy's and one cudaMemset on the legacy stream:
  // all landed before the non-blocking stream reads them.
  CUDA_CHECK(cudaDeviceSynchronize());
  for (const KernelRow& row : kernels) {
    const double ms = time_on_stream(stream, /*rounds=*/3, reps, row.run) * 1e3;
    auto it = ref.find(row.name);
    const bool has_ref = it != ref.end();
    if (has_ref) {
      etr_total += ms;
      ref_total += it->second;
    }
    ctx.print(t.row({row.name, cell("%.3f", ms), has_ref ? cell("%.3f", it->second) : "-",
                     has_ref ? cell("%.2fx", it->second / ms) : "-"}));
    rows.push_back({{"name", row.name},
                    {"etr_ms", ms},
                    {"torch_ms", has_ref ? nlohmann::json(it->second) : nlohmann::json(nullptr)}});
  }
  if (ref_total > 0) {
    ctx.print(t.row({"total (rows with both)", cell("%.3f", etr_total), cell("%.3f", ref_total),
                     cell("%.2fx", ref_total / etr_total)}));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  pool.release();
  if (!json.empty()) {
    ctx.write_json(json, {{"machine", ctx.machine().to_json()},
                          {"gpu", card},
                          {"reference", about},
                          {"gpu_kernels", rows}});
  }
}

}  // namespace

void add_gpu_kernels_subcommand(CLI::App& app, SubcommandList& list) {
  struct Args {
    int reps = 20;
    std::string reference, json;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "gpu-kernels",
      "Each CUDA kernel at GPT-2 124M's shapes beside PyTorch's (one rank, one GPU)");
  cmd->add_option("--reps", a->reps, "Timed launches; the median is reported")
      ->capture_default_str();
  cmd->add_option("--reference", a->reference,
                  "PyTorch's timings of the same rows (bench/pytorch_gpu_kernels.py --json)");
  cmd->add_option("--json", a->json, "Also write the figures to this JSON file");
  list.push_back({cmd, [a](BenchContext& ctx) {
                    if (a->reps < 1) throw ConfigError("--reps must be at least 1");
                    run_gpu_kernels(ctx, a->reps, a->reference, a->json);
                  }});
}

}  // namespace etr::bench
